"""AgentFlow: the router agents talk to, token-in/token-out bookkeeping, the trajectory
store, white-box and black-box agents, and the sandboxes they run commands in."""
