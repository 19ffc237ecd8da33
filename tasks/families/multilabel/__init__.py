"""Multi-label classification: each text (or text pair) has a set of labels, any number of
them (topics, tags, emotions). The family in one folder:

    config.py    MultiLabelConfig and the checks of its flags and label file, TF-free:
                 the command refuses a bad one before TensorFlow loads
    data.py      the reader: .tsv / .csv / .jsonl with a label list per row, a label file
    metrics.py   micro / macro / per-label F1, exact match, per-label thresholds
    task.py      MultiLabelTask for tasks/driver.py: a sigmoid per label, binary
                 cross-entropy, each label's bias started at its training log-odds,
                 thresholds tuned on the dev set (where they beat 0.5) and kept with
                 the run; a test file with labels scored
    serving.py   MultiLabelModule: raw text -> every label's probability and the set
    __main__.py  the command line: python -m tasks.families.multilabel

    python -m tasks.families.multilabel --train_file=train.jsonl --dev_file=dev.jsonl \\
        --test_file=test.jsonl --label_file=labels.txt --init_checkpoint=MODEL_DIR \\
        --output_dir=runs/topics --do_train --do_eval --do_predict
    python -m export.saved_model --task multilabel --checkpoint_dir runs/topics \\
        --output_dir models/topics

Its name, `multilabel`, is the run directory's (multilabel_config.json), export's --task
and this folder's; tasks/families/__init__.py registers it in one line. The model is
`bert_tf.BertClassifier` (dropout + dense(K) on the pooled [CLS]); the run records it.
"""
