"""A member with a frontend extension and no nodes (natively skipped as a node pack, its web
folder served all the same)."""

WEB_DIRECTORY = "web"
