"""Command-line helpers shared by the commands."""

import argparse
import sys


def str2bool(value):
    """absl-style booleans, as google-research/bert's flags accept them:
    --do_lower_case, --do_lower_case=true, --do_lower_case=False."""
    if isinstance(value, bool):
        return value
    if value.lower() in ("1", "true", "yes", "y"):
        return True
    if value.lower() in ("0", "false", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def run_command(run, args):
    """`run(args)`; a bad input (ValueError, FileNotFoundError) becomes one line on
    stderr, `error: ...`, and exit status 1."""
    try:
        return run(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
