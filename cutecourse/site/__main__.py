"""``python -m cutecourse.site [OUT]``: build the course site (default ``build/site``)."""

import argparse
import sys

from . import DEFAULT_OUT, SiteError, build


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cutecourse.site", description=__doc__)
    ap.add_argument("out", nargs="?", default=str(DEFAULT_OUT), help="output folder (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        built = build(args.out)
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
