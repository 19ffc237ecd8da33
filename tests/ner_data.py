"""A small English NER set in CoNLL (IOB2 tags): templated sentences whose entities come
from TRAIN_ENTITIES or, held out, HELD_OUT_ENTITIES (names never seen in training); slots
marked {ANY} take any type, so only the entity's meaning tells it there. The Chinese sets
are in chinese_data.py."""

import random

TRAIN_ENTITIES = {
    "PER": ["John Smith", "Mary", "Peter", "Anna", "David", "Sarah Jones", "Michael",
            "Linda", "Robert", "Emma", "James", "Olivia"],
    "LOC": ["Paris", "London", "Berlin", "Madrid", "Rome", "Tokyo", "New Delhi", "France",
            "Spain", "Canada", "Texas", "Ohio"],
    "ORG": ["Google", "Microsoft", "Toyota", "Nike", "Siemens", "IBM", "Intel", "Adidas",
            "General Motors", "Shell", "Boeing", "Pepsi"],
}
HELD_OUT_ENTITIES = {
    "PER": ["William", "Sophia", "Thomas", "Grace", "Daniel", "Lucy Brown", "George",
            "Alice", "Henry", "Chloe"],
    "LOC": ["Vienna", "Dublin", "Lisbon", "Oslo", "Cairo", "Brazil", "Mexico",
            "Buenos Aires", "Kenya", "Florida"],
    "ORG": ["Samsung", "Amazon", "Netflix", "Honda", "Sony", "Nokia", "Oracle",
            "Deutsche Bank", "Walmart", "Nissan"],
}
# Slots marked {ANY} take any type: only the entity's meaning tells its type there.
TEMPLATES = [
    "We talked about {ANY} for an hour .",
    "The report mentioned {ANY} twice .",
    "Everyone was surprised by {ANY} last year .",
    "{ANY} was in the news again .",
    "{PER} moved to {LOC} in the spring .",
    "{PER} works for {ORG} now .",
    "{ORG} opened an office in {LOC} .",
]


def make_conll(path, num_sentences, entities, seed, columns=4):
    """A CoNLL file of templated sentences (IOB2 tags), with -DOCSTART- lines."""
    from tasks.families.ner.task import DOCSTART
    rng = random.Random(seed)
    lines = [f"{DOCSTART} -X- -X- O" if columns == 4 else f"{DOCSTART} O", ""]
    for _ in range(num_sentences):
        template = rng.choice(TEMPLATES)
        for word in template.split():
            if word.startswith("{"):
                kind = word.strip("{}")
                kind = rng.choice(sorted(entities)) if kind == "ANY" else kind
                for i, part in enumerate(rng.choice(entities[kind]).split()):
                    tag = f"{'B' if i == 0 else 'I'}-{kind}"
                    lines.append(f"{part} NNP I-NP {tag}" if columns == 4 else f"{part} {tag}")
            else:
                lines.append(f"{word} NN I-NP O" if columns == 4 else f"{word} O")
        lines.append("")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path
