"""Reading a callgrind profile: the one parser `callgrind-nodes.py` and `callgrind-mca.py` share.

`records(path)` yields one `Cost` per cost line of the profile, with the compressed function
and file references (`fn=(12) name`, then `fn=(12)`) resolved to names and the position
columns (`positions: line`, or `instr line` with `--dump-instr=yes`; each given absolute in
decimal or 0x hex, relative +n/-n, or unchanged *) made absolute. A cost line right after
`calls=` is a call's cost: the callee's inclusive cost, counted to the caller's inclusive
total but not to its own instructions (`Cost.call`). Functions are told apart by name
(record with `--demangle=no`: every monomorphised function keeps its own symbol); two of one
name in different objects (`(below main)`) add up.
"""
import collections
import re

_REF = re.compile(r"\((\d+)\)(?: (.*))?")

Cost = collections.namedtuple("Cost", "fn file pos costs call")


class Profile:
    """The profile's header facts, known once its lines are read: `events` (`Ir` first,
    then `D1mr` … with `--cache-sim=yes`) and `positions` (column names)."""

    def __init__(self):
        self.events = ["Ir"]
        self.positions = ["line"]

    def column(self, name):
        """The index of position column `name` (`line`, `instr`), or None."""
        return self.positions.index(name) if name in self.positions else None


def records(path, profile=None):
    """Yields every cost line of the callgrind profile at `path` as a `Cost`; fills
    `profile` (a `Profile`) with the header facts as it reads them."""
    profile = profile if profile is not None else Profile()
    fns, files = {}, {}

    def ref(table, tok):
        m = _REF.match(tok)
        if m is None:  # an uncompressed name
            return tok
        if m.group(2):
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1))

    fn = file = None
    in_call = False
    pos = [0]
    for raw in open(path):
        s = raw.rstrip("\n")
        if s.startswith("events:"):
            profile.events = s.split()[1:]
            continue
        if s.startswith("positions:"):
            profile.positions = s.split()[1:]
            pos = [0] * len(profile.positions)
            continue
        if s.startswith("fn="):
            fn = ref(fns, s[3:])
            in_call = False
            continue
        if s.startswith(("fl=", "fi=", "fe=")):
            file = ref(files, s[3:])
            continue
        if s.startswith("cfn="):
            ref(fns, s[4:])
            continue
        if s.startswith(("cfi=", "cfl=")):
            ref(files, s[4:])
            continue
        if s.startswith(("cob=", "ob=")):
            continue
        if s.startswith("calls="):
            in_call = True
            continue
        if not s or not (s[0].isdigit() or s[0] in "+-*"):
            continue
        parts = s.split()
        n = len(pos)
        for i, p in enumerate(parts[:n]):
            if p == "*":
                pass
            elif p[0] in "+-":
                pos[i] += int(p, 0)
            else:
                pos[i] = int(p, 0)
        costs = [int(c) for c in parts[n:]]
        if fn is not None:
            yield Cost(fn, file, tuple(pos), costs, in_call)
        in_call = False
