"""`posttrain make-model` (being written)."""


def register(subparsers) -> None:
    p = subparsers.add_parser("make-model".replace("config-cmd", "config"), help="(not written yet)")
    p.set_defaults(func=lambda args: print("not written yet") or 1)
