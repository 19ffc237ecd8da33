"""`python -m tasks.ner`: NER's command, which lives in its family's folder
(tasks/families/ner/__main__.py); this name stays for google-research/bert's users."""

from tasks.families.ner.__main__ import (FEATURE_LAYERS, FLAGS, NerConfig,  # noqa: F401
                                         NerTask, add_flags, main)

if __name__ == "__main__":
    main()
