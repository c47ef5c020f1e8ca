"""`python -m sluice_stats [-s <stats.sock>] ls|dump [<pattern>...]`."""

import argparse
import sys

from . import StatsClient, StatsError, default_socket


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sluice_stats",
                                 description="Read a Sluice daemon's statistics segment.")
    ap.add_argument("-s", "--socket", default=default_socket(), help="the stats socket")
    ap.add_argument("op", choices=["ls", "dump"])
    ap.add_argument("patterns", nargs="*")
    a = ap.parse_args(argv)
    try:
        with StatsClient(a.socket) as st:
            if a.op == "ls":
                for n in st.ls(*a.patterns):
                    print(n)
            else:
                for n, v in st.dump(*a.patterns).items():
                    print(f"{n}: {v}")
    except StatsError as e:
        print(f"sluice_stats: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
