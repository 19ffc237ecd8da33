"""`python -m tasks.squad`: SQuAD's command, which lives in its family's folder
(tasks/families/squad/__main__.py); this name stays for google-research/bert's users."""

from tasks.families.squad.__main__ import main

if __name__ == "__main__":
    main()
