"""Hadron's MCP tools, one module per family; ``TOOLS`` is the contract's list for this build."""

from __future__ import annotations

# The tools of the graph-memory issue, named exactly as in the contract (spec/hadron.md).
SELECTION_TOOLS = (
    "hadron_list_memories",
    "hadron_set_active_memory",
    "hadron_list_apps",
    "hadron_set_active_app",
    "hadron_set_active_org",
    "hadron_server_info",
)
NODE_TOOLS = (
    "hadron_create_node",
    "hadron_create_parent_node",
    "hadron_update_node",
    "hadron_update_node_data",
    "hadron_create_edge",
    "hadron_move_node",
    "hadron_delete_node",
    "hadron_get_node",
    "hadron_get_next_node",
    "hadron_list_nodes",
)
OBJECT_TOOLS = (
    "hadron_create_object",
    "hadron_get_object",
    "hadron_update_object",
    "hadron_delete_object",
    "hadron_find_objects",
)
VALIDATE_TOOLS = ("hadron_validate",)
ISSUE_5_TOOLS = SELECTION_TOOLS + NODE_TOOLS + OBJECT_TOOLS + VALIDATE_TOOLS
# The tools of the search issue (issue 6).
SEARCH_TOOLS = ("hadron_find_nodes", "hadron_search")
SCOPE_TOOLS = (
    "hadron_list_scopes",
    "hadron_create_scope",
    "hadron_update_scope",
    "hadron_delete_scope",
    "hadron_scope_explain",
    "hadron_set_active_scope",
)
ISSUE_6_TOOLS = SEARCH_TOOLS + SCOPE_TOOLS
# The team tools (issue 14).
SESSION_TOOLS = ("hadron_start_session", "hadron_end_session", "hadron_whoami")
WORKER_TOOLS = ("hadron_cast_worker", "hadron_list_workers", "hadron_get_worker", "hadron_update_worker")
CHAT_TOOLS = ("hadron_team_chat_post", "hadron_team_chat_read")
WORKLOG_TOOLS = ("hadron_record_work", "hadron_team_work_items")
CHANNEL_TOOLS = (
    "hadron_list_channels",
    "hadron_create_channel",
    "hadron_channel_read",
    "hadron_channel_post",
    "hadron_register_list",
    "hadron_register_add",
    "hadron_register_remove",
)
ISSUE_14_TOOLS = SESSION_TOOLS + WORKER_TOOLS + CHAT_TOOLS + WORKLOG_TOOLS + CHANNEL_TOOLS
# Executable action nodes (issue 18).
ACTION_TOOLS = ("hadron_run_action",)
# Git-backed memories (issue 18).
GIT_TOOLS = ("hadron_sync_graph",)
# The live server's tools the reference does not name (issue 28): the hosted server's generated tool list,
# shipped in the official CLI (hadron-memory/hadron-cli, internal/cmd/spec/mcp-tools.txt, 2026-08-06),
# with the argument names and result fields of its GraphQL schema. docs/hadron.md documents them.
LIVE_SERVER_TOOLS = (
    "hadron_update_edge",
    "hadron_delete_edge",
    "hadron_get_nodes",
    "hadron_read_node",
    "hadron_replace_text",
    "hadron_lock_memory",
    "hadron_unlock_memory",
)
# Names on that list this build does not serve, and why (docs/decisions/0059-hadron-run-task-not-served.md).
NOT_SERVED = {
    "hadron_run_task": "runner-internal: executing a task mints a headless LLM run on the hosted runner",
}
# Everything this build registers.
TOOLS = ISSUE_5_TOOLS + ISSUE_6_TOOLS + ISSUE_14_TOOLS + ACTION_TOOLS + GIT_TOOLS + LIVE_SERVER_TOOLS
