"""`python -m tasks.glue`: the classification family's command, which lives in its
family's folder (tasks/families/classification/__main__.py); this name stays for
google-research/bert's users."""

from tasks.families.classification.__main__ import main

if __name__ == "__main__":
    main()
