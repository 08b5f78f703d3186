"""A synthetic language whose word statistics plant known relations: GloVe's default corpus.

Word vectors are judged by analogies ("paris is to france as rome is to
?") on real text, which needs a download. This module writes text, from a
seed and in a few seconds, in which such analogies are answerable *by
construction*, so the whole GloVe pipeline can be run and checked offline.

**The idea.** GloVe learns ``v_i · ṽ_j ≈ log X_ij``: a word's vector
encodes which words it co-occurs with, and how often. Here every *relation
word* is one of two *forms* of a *concept*: (rome, italy), (king, queen),
(cat, cats), (walking, walked), (big, bigger). A sentence about a concept
holds, shuffled:

- one form of the concept, chosen at random;
- 4 *topic words* drawn from the concept's topic distribution over its
  family's topic words (pseudo-words): the same for both forms. The
  distribution is ``softmax(a_c · e_t)`` with a latent vector ``a_c`` per
  concept (its group's centre plus its own offset: concepts come in
  groups of about five, like regions) and ``e_t`` per topic word. Every
  concept touches every topic word, with different weights, so the
  *counts* tell concepts apart, not only which pairs occur (GloVe only
  sees the non-zero counts);
- 2 *marker words* of the form, the same for *every* concept of the
  family: "she", "her" around female words, "many", "these" around
  plurals, "yesterday" around past tenses... drawn from the form's own
  side with probability 0.8, from the other side's otherwise;
- 3 to 8 *fillers* from a Zipfian background vocabulary ("the", "of", ...);
  a fifth of the sentences are fillers only.

The log-counts of a form are then (its concept's topic logits) + (its
side's marker logits), so its vector is close to ``u_concept + m_form``
and ``v(queen) - v(king) + v(man) ≈ u_man + m_female = v(woman)``: the
3CosAdd analogy test can find every planted answer, if the model learned.

Relations ship as an analogy file in the Google format (``: section``
headers, then ``a b c d`` meaning a:b :: c:d, sections named as Google's,
``gram*`` ones syntactic) and a similarity file (``word1 word2 score``)
scored by construction (see :func:`similarity_pairs`).

Cost: O(num_tokens) with numpy, about a second per million tokens. With the
defaults (2 M tokens, 860 words of count >= 5, 435 k non-zeros at window 10)
minidist's GloVe (d = 50) answers about 90% of the 3,320 questions after 10
epochs and 95% after 20 (7 seconds on one core).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from minidist.data.synthetic_corpus import SyntheticCorpus
from minidist.util.values import whole

# Each family: (section name, marker words of form 0, of form 1, "form0 form1" pairs).
FAMILIES = [
    ("capital-common-countries", "city mayor downtown streets", "nation border citizens economy",
     "athens:greece baghdad:iraq bangkok:thailand beijing:china berlin:germany bern:switzerland "
     "cairo:egypt canberra:australia hanoi:vietnam havana:cuba helsinki:finland "
     "islamabad:pakistan kabul:afghanistan london:england madrid:spain moscow:russia "
     "oslo:norway ottawa:canada paris:france rome:italy stockholm:sweden tehran:iran "
     "tokyo:japan lisbon:portugal dublin:ireland warsaw:poland vienna:austria "
     "nairobi:kenya lima:peru ankara:turkey"),
    ("family", "he his him himself", "she her hers herself",
     "boy:girl brother:sister father:mother son:daughter king:queen man:woman husband:wife "
     "uncle:aunt nephew:niece grandfather:grandmother grandson:granddaughter prince:princess "
     "stepfather:stepmother stepson:stepdaughter dad:mom groom:bride lord:lady "
     "emperor:empress actor:actress waiter:waitress"),
    ("gram3-comparative", "very quite so too", "than even much far",
     "big:bigger small:smaller bad:worse good:better cold:colder warm:warmer fast:faster "
     "slow:slower tall:taller short:shorter strong:stronger weak:weaker young:younger "
     "old:older cheap:cheaper rich:richer loud:louder quiet:quieter bright:brighter "
     "dark:darker hard:harder soft:softer wide:wider deep:deeper easy:easier"),
    ("gram7-past-tense", "now currently is are", "yesterday ago was were",
     "dancing:danced walking:walked singing:sang running:ran swimming:swam playing:played "
     "writing:wrote jumping:jumped looking:looked listening:listened thinking:thought "
     "flying:flew going:went saying:said eating:ate sleeping:slept falling:fell "
     "buying:bought selling:sold speaking:spoke driving:drove hiding:hid shaking:shook "
     "seeing:saw reading:read"),
    ("gram8-plural", "one this that a", "many these those several",
     "banana:bananas bird:birds cat:cats dog:dogs cow:cows horse:horses apple:apples "
     "car:cars house:houses child:children mouse:mice window:windows bottle:bottles "
     "road:roads pig:pigs eye:eyes hand:hands machine:machines computer:computers "
     "cloud:clouds lion:lions snake:snakes monkey:monkeys onion:onions "
     "pineapple:pineapples melon:melons rat:rats dream:dreams bridge:bridges coin:coins"),
]
FUNCTION_WORDS = "the of and to in for with on by at from as it or be".split()
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
TOPIC_WORDS_PER_CONCEPT = 2  # a family of n concepts has 2n topic words
GROUP_SIZE = 5  # concepts per group (a "region" of countries, ...)
LATENT_DIM = 8  # dimension of the latent space of concepts and topic words
CONCEPT_SPREAD = 0.7  # how far a concept sits from its group's centre
TOPIC_SHARPNESS = 1.0  # scale of the topic logits: higher, fewer topic words per concept


def pseudo_words(rng: np.random.Generator, count: int, taken: set[str]) -> list[str]:
    """``count`` new pronounceable words of 2-3 syllables, none of them in ``taken``."""
    words: list[str] = []
    while len(words) < count:
        word = "".join(rng.choice(SYLLABLES, size=rng.integers(2, 4)))
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


def analogy_questions(pairs: list[tuple[str, str]]) -> list[tuple[str, str, str, str]]:
    """Every ``a b c d`` with (a, b) and (c, d) two different pairs of the relation."""
    return [(a, b, c, d) for a, b in pairs for c, d in pairs if a != c]


def softmax(logits: np.ndarray) -> np.ndarray:
    """``exp(logits)`` divided by its sum: a probability distribution."""
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


class Family(NamedTuple):
    """The planted model of one relation: its forms, markers and topic distributions."""

    name: str
    forms: np.ndarray  # (concepts, 2) word ids
    markers: np.ndarray  # (8,) word ids: 4 markers of form 0, then 4 of form 1
    topics: np.ndarray  # (T,) word ids of the family's topic words
    topic_logits: np.ndarray  # (concepts, T): each concept's log-weights over them


def plant_family(rng: np.random.Generator, name: str, marker_words: list[str],
                 pairs: list[tuple[str, str]], new_ids: Callable[[list[str]], np.ndarray],
                 taken: set[str]) -> Family:
    """Word ids and topic distributions of one family (log-linear in a latent space).

    Concept c's topic distribution is softmax(a_c · e_t) over the family's
    topic words t, with a_c = its group's centre + its own offset and
    e_t random: every concept touches every topic word, with different
    weights, so counts (not only presence) tell concepts apart.
    """
    forms = new_ids([word for pair in pairs for word in pair]).reshape(-1, 2)
    markers = new_ids(marker_words)
    topics = new_ids(pseudo_words(rng, TOPIC_WORDS_PER_CONCEPT * len(pairs), taken))
    groups = rng.permutation(len(pairs)) % max(len(pairs) // GROUP_SIZE, 1)
    centres = rng.standard_normal((groups.max() + 1, LATENT_DIM))
    latent = centres[groups] + CONCEPT_SPREAD * rng.standard_normal((len(pairs), LATENT_DIM))
    embedding = rng.standard_normal((len(topics), LATENT_DIM))
    return Family(name, forms, markers, topics, TOPIC_SHARPNESS * latent @ embedding.T)


def generate_corpus(seed: int = 0, num_tokens: int = 2_000_000, topic_draws: int = 4,
                    marker_draws: int = 2, marker_purity: float = 0.8,
                    filler_words: int = 300, background_fraction: float = 0.2,
                    num_similarity_pairs: int = 200) -> SyntheticCorpus:
    """About ``num_tokens`` tokens of the synthetic language, reproducible from ``seed``.

    A relation sentence holds one form of a concept, ``topic_draws`` words
    of the concept's topic, ``marker_draws`` markers (of the form's own
    side with probability ``marker_purity``, of the other side otherwise)
    and 3 to 8 fillers, shuffled; a ``background_fraction`` of sentences
    are fillers only (8 to 16). Fillers follow Zipf's law over
    ``filler_words`` words, the commonest being English function words.

    Cost: O(num_tokens).
    """
    seed = whole("seed", seed)  # None would be a new language every call
    rng = np.random.default_rng(seed)
    pairs = {name: [tuple(pair.split(":")) for pair in text.split()]
             for name, _, _, text in FAMILIES}
    taken = {w for _, m0, m1, _ in FAMILIES for w in (m0 + " " + m1).split()}
    taken |= {w for family in pairs.values() for pair in family for w in pair}
    taken |= set(FUNCTION_WORDS)
    words: list[str] = []  # the language's whole vocabulary; ids index into it

    def new_ids(names: list[str]) -> np.ndarray:
        words.extend(names)
        return np.arange(len(words) - len(names), len(words))

    # 1. The planted model: families, then the filler vocabulary.
    families = [plant_family(rng, name, (m0 + " " + m1).split(), pairs[name], new_ids, taken)
                for name, m0, m1, _ in FAMILIES]
    fillers = new_ids(FUNCTION_WORDS + pseudo_words(rng, filler_words - len(FUNCTION_WORDS),
                                                    taken))
    zipf = 1.0 / (np.arange(len(fillers)) + 2.7)
    zipf /= zipf.sum()

    # 2. Relation sentences: a form, its topic words, markers, fillers (-1 = no word).
    relation_len = 1 + topic_draws + marker_draws + 5.5
    mean_len = (1 - background_fraction) * relation_len + background_fraction * 12
    num_sentences = max(int(num_tokens / mean_len), 1)
    num_relation = int(round(num_sentences * (1 - background_fraction)))
    concepts = [(f, c) for f, family in enumerate(families) for c in range(len(family.forms))]
    chosen = rng.integers(0, len(concepts), num_relation)
    form = rng.integers(0, 2, num_relation)
    own_side = rng.random((num_relation, marker_draws)) < marker_purity
    side = np.where(own_side, form[:, None], 1 - form[:, None])
    table = np.full((num_relation, 1 + topic_draws + marker_draws + 8), -1, np.int64)
    for number, (f, c) in enumerate(concepts):
        rows = np.flatnonzero(chosen == number)
        family = families[f]
        table[rows, 0] = family.forms[c, form[rows]]
        draws = rng.choice(len(family.topics), (len(rows), topic_draws),
                           p=softmax(family.topic_logits[c]))
        table[rows, 1:1 + topic_draws] = family.topics[draws]
        slot = 4 * side[rows] + rng.integers(0, 4, (len(rows), marker_draws))
        table[rows, 1 + topic_draws:1 + topic_draws + marker_draws] = family.markers[slot]
    filler_slots = table[:, -8:]
    filler_slots[:] = fillers[rng.choice(len(fillers), (num_relation, 8), p=zipf)]
    filler_slots[np.arange(8) >= rng.integers(3, 9, num_relation)[:, None]] = -1

    # 3. Background sentences: 8 to 16 fillers.
    num_background = num_sentences - num_relation
    background = np.full((num_background, max(16, table.shape[1])), -1, np.int64)
    background[:, :16] = fillers[rng.choice(len(fillers), (num_background, 16), p=zipf)]
    background[np.arange(background.shape[1]) >= rng.integers(8, 17, num_background)[:, None]] = -1
    sentences = np.concatenate((table, background[:, :table.shape[1]]))
    sentences = rng.permuted(sentences[rng.permutation(num_sentences)], axis=1)
    lines = to_token_lines(sentences, np.array(words))

    # 4. The test files.
    analogies = {name: analogy_questions(pairs[name]) for name, _, _, _ in FAMILIES}
    similarities = similarity_pairs(rng, families, np.array(words), num_similarity_pairs,
                                    marker_purity)
    return SyntheticCorpus(lines, analogies, similarities, seed, pairs)


def to_token_lines(table: np.ndarray, words: np.ndarray) -> list[list[str]]:
    """Rows of word ids (-1 = no word) as lists of word strings; empty rows dropped."""
    keep = table >= 0
    tokens = words[table[keep]].tolist()
    ends = np.cumsum(keep.sum(axis=1)).tolist()
    return [tokens[start:end] for start, end in zip([0] + ends[:-1], ends, strict=True)
            if end > start]


def similarity_pairs(rng: np.random.Generator, families: list[Family], words: np.ndarray,
                     count: int, marker_purity: float) -> list[tuple[str, str, float]]:
    """``count`` pairs of relation words, with a similarity score in [0, 10] by construction.

    The log-probability of a form's context words is, up to a constant,
    its concept's topic logits on the family's topic words and
    ±log(purity / (1 - purity)) / 2 on the markers of its own / other
    form: that is what GloVe's log-bilinear model can capture. Two forms
    of one family score 5 + 5 × the cosine of these centred profiles;
    forms of two families share no context and score 0. Half the pairs
    are drawn within a family, so that the scores spread.
    """
    marker_logit = 0.5 * np.log(marker_purity / (1 - marker_purity))
    profiles, names = [], []
    for f, family in enumerate(families):
        topic = family.topic_logits - family.topic_logits.mean(axis=1, keepdims=True)
        for c, pair in enumerate(family.forms):
            for form, word in enumerate(pair):
                markers = np.where(np.arange(8) // 4 == form, marker_logit, -marker_logit)
                profiles.append(np.concatenate((topic[c], markers)))
                names.append((f, str(words[word])))
    chosen: set[tuple[int, int]] = set()
    while len(chosen) < count:
        s = int(rng.integers(len(names)))
        t = int(rng.choice([t for t, (f, _) in enumerate(names) if f == names[s][0]]))
        if t != s:
            chosen.add((min(s, t), max(s, t)))
    result = []
    for s, t in sorted(chosen):
        a, b = profiles[s], profiles[t]
        cosine = float(a @ b / np.sqrt((a @ a) * (b @ b)))
        result.append((names[s][1], names[t][1], round(5 + 5 * cosine, 2)))
    return result
