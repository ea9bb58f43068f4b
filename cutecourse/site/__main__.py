"""``python -m cutecourse.site [--learner] [OUT]``: build the course site (default ``build/site``;
``--learner``: the edition without solutions or design notes, default ``build/site-learner``)."""

import argparse
import sys

from . import DEFAULT_OUT, LEARNER_OUT, SiteError, build


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cutecourse.site", description=__doc__)
    ap.add_argument("out", nargs="?", default=None,
                    help=f"output folder (default: {DEFAULT_OUT}, or {LEARNER_OUT} with --learner)")
    ap.add_argument("--learner", action="store_true",
                    help="the learner edition: no solutions, no link to one, no design notes")
    args = ap.parse_args(argv)
    out = args.out or str(LEARNER_OUT if args.learner else DEFAULT_OUT)
    try:
        built = build(out, learner=args.learner)
    except SiteError as exc:
        if exc.log:
            print(exc.log[-4000:], file=sys.stderr)
        print(f"site: {exc.what}\n  -> {exc.fix}", file=sys.stderr)
        return 1
    widgets = sum(built.staged.widgets.values())
    print(f"site: {built.report.pages} pages, {built.report.links} local links and files checked, "
          f"{widgets} widgets shown as their pictures, built in {built.seconds:.0f} s")
    print(f"site: open {built.out / 'index.html'} or serve the folder: "
          f"python -m http.server -d {built.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
