"""Worker scripts that the multi-node tests start on the virtual nodes."""
