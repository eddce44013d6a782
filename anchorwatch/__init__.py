"""anchorwatch: per-document-type semantic drift monitoring for LLM gateways."""

__version__ = "0.1.0"
