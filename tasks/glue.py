"""`python -m tasks.glue`: the classification family's command, which lives in its
family's folder (tasks/families/glue/__main__.py); this name stays for
google-research/bert's users."""

from tasks.families.glue.__main__ import (FLAGS, TASK_NAMES,  # noqa: F401
                                          ClassificationConfig, ClassificationTask,
                                          add_flags, main)

if __name__ == "__main__":
    main()
