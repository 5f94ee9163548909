"""The Spark Connect client of keyed-watermarks (see backend.py)."""
