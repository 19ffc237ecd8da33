"""`python -m tasks.swag`: SWAG's command, which lives in its family's folder
(tasks/families/swag/__main__.py); this name stays for google-research/bert's users."""

from tasks.families.swag.__main__ import FLAGS, add_flags, main  # noqa: F401

if __name__ == "__main__":
    main()
