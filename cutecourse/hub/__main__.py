"""``python -m cutecourse.hub``: what ``./course.sh room`` runs."""

import sys

from .cli import main

sys.exit(main())
