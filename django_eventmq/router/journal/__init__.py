"""The router's journal: every accepted job on local disk until it finished."""
