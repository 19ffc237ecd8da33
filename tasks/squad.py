"""`python -m tasks.squad`: SQuAD's command, which lives in its family's folder
(tasks/families/squad/__main__.py); this name stays for google-research/bert's users."""

from tasks.families.squad.__main__ import (DEFAULTS, FLAGS, SquadConfig,  # noqa: F401
                                           SquadTask, add_flags, main)

if __name__ == "__main__":
    main()
