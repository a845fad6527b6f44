from triptych.cli import main

raise SystemExit(main())
