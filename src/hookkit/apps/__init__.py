"""Applications built on the public API: the command line, the demo and the HTML report."""
