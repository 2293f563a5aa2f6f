"""Which language a text is in: Annif's detector, and the check that warns when a text is not in its model's.

Why: catalogues mix languages, and a model trained on English titles scores a German one with confident
nonsense. Annif answers ``POST /v1/detect-language`` and ``annif detect-language`` with simplemma's
detector (``annif/simplemma_util.py``): the share of a text's sampled words (simplemma's
``MostCommonTokenSampler``: words of three or more letters, capitalised ones dropped unless most are)
that each candidate language's dictionary or rules recognise, plus ``unk``, the share none recognises.
:func:`detect` gives exactly that answer, in Annif's order (score descending, ties in candidate order,
``unk`` last among equals), computed through a per-word cache: the shares depend on the words only, and
a catalogue repeats its words, so a title costs a few dictionary look-ups rather than dozens
(simplemma alone: ~0.6 ms a title with five candidates).

:class:`LanguageCheck` is the warning ``xmtc predict`` and ``xmtc serve`` give. A short text is weak
evidence (a three-word title may be all names, and "Finland" is Swedish and English alike), so it warns
only on clear evidence, every part of the rule measured on real titles (``benchmarks/language_check.py``,
figures in docs/guides/languages.md): at least :data:`MIN_WORDS` sampled words, another candidate
recognises at least :data:`MIN_SHARE` of them, and that is at least :data:`MIN_MARGIN` more than the
model's language does. Only a text that the model's own dictionary leaves in doubt (it recognises at most
1 - :data:`MIN_MARGIN` of its words) is looked up in the others, so a run whose texts are all in the
model's language never loads them (Finnish: ~4 s, ~340 MB). A model knows its language when it was trained with ``--language``
(:func:`model_language`); one trained without is not checked, since there is nothing to compare with.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

from ..errors import ConfigError

log = logging.getLogger(__name__)

ANNIF_MAX_CANDIDATES = 5  # annif.yaml: languages has minItems 1, maxItems 5
DEFAULT_CANDIDATES = ("en", "fi", "sv", "de", "fr")  # the languages a Finnish catalogue meets most
MIN_WORDS = 4
MIN_SHARE = 0.75
MIN_MARGIN = 0.5
_CACHE_LIMIT = 500_000  # words remembered per detector (~100 bytes each); cleared when full


def supported_languages() -> frozenset[str]:
    """The language codes the installed simplemma has dictionaries for."""
    from simplemma.strategies.dictionaries.dictionary_factory import SUPPORTED_LANGUAGES

    return frozenset(SUPPORTED_LANGUAGES)


def parse_languages(spec: str | Sequence[str], where: str = "languages") -> tuple[str, ...]:
    """``"en,fi,sv"`` (or a list) as a tuple of supported codes, in order, without repeats; a code simplemma
    lacks is a :class:`~xmtc.errors.ConfigError` naming it."""
    codes = [c.strip() for c in (spec.split(",") if isinstance(spec, str) else spec)]
    codes = list(dict.fromkeys(c for c in codes if c))
    if not codes:
        raise ConfigError(f"{where}: give at least one language code, e.g. en,fi,sv")
    known = supported_languages()
    bad = [c for c in codes if c not in known]
    if bad:
        raise ConfigError(f"{where}: unsupported language {bad[0]!r} (simplemma has: {', '.join(sorted(known))})")
    return tuple(codes)


class Detector:
    """simplemma's ``LanguageDetector.proportion_in_each_language`` for fixed candidates, with a word cache.

    Dictionaries load on first use (Finnish: ~4 s and ~340 MB; English ~0.3 s and ~20 MB); :meth:`load`
    loads them all at once, for a server's start. An unsupported code raises ``ValueError`` (simplemma's)
    when a word is first looked up, as Annif's detector does; a text with no word to sample gives
    ``{"unk": 1}`` whatever the candidates.
    """

    def __init__(self, languages: Sequence[str]):
        from simplemma.strategies import DefaultStrategy
        from simplemma.token_sampler import MostCommonTokenSampler

        self.languages = tuple(languages)
        self._sampler = MostCommonTokenSampler()
        self._strategy = DefaultStrategy()
        self._known: dict[str, tuple[bool, ...]] = {}

    def load(self) -> "Detector":
        for lang in self.languages:
            self._strategy.get_lemma("test", lang)
        return self

    def words(self, text: str) -> list[str]:
        from simplemma.utils import normalize_token

        return [normalize_token(t) for t in self._sampler.sample_text(text)]

    def _recognised(self, word: str) -> tuple[bool, ...]:
        hit = self._known.get(word)
        if hit is None:
            hit = tuple(self._strategy.get_lemma(word, lang) is not None for lang in self.languages)
            if len(self._known) >= _CACHE_LIMIT:
                self._known.clear()
            self._known[word] = hit
        return hit

    def proportions(self, text: str) -> tuple[dict[str, float], int]:
        """``({language: share, ..., "unk": share}, sampled words)``, simplemma's figures."""
        words = self.words(text)
        if not words:
            return {"unk": 1}, 0
        hits = [self._recognised(w) for w in words]
        n = len(words)
        out = {lang: sum(h[i] for h in hits) / n for i, lang in enumerate(self.languages)}
        out["unk"] = sum(not any(h) for h in hits) / n
        return out, n


_DETECTORS: dict[tuple[str, ...], Detector] = {}


def detector(languages: Sequence[str]) -> Detector:
    """One shared :class:`Detector` per candidate tuple (the word cache is what makes repeats cheap)."""
    key = tuple(languages)
    if key not in _DETECTORS:
        if len(_DETECTORS) >= 32:
            _DETECTORS.clear()
        _DETECTORS[key] = Detector(key)
    return _DETECTORS[key]


def detect(text: str, languages: Sequence[str]) -> list[tuple[Optional[str], float]]:
    """Annif's answer: ``[(language or None for unknown, score), ...]``, best first (see the module doc).
    Raises ``ValueError`` for a candidate simplemma lacks (Annif's 400), as Annif does."""
    shares, _ = detector(languages).proportions(text)
    ranked = sorted(shares.items(), key=lambda item: item[1], reverse=True)
    return [(None if lang == "unk" else lang, score) for lang, score in ranked]


def model_language(model) -> Optional[str]:
    """The language a model was trained for (``--language``), or None; an ensemble's when its members agree."""
    members = getattr(model, "models", None) or getattr(model, "members", None)
    if isinstance(members, (list, tuple)) and members and not hasattr(model, "language"):
        langs = {model_language(m) for m in members}
        return langs.pop() if len(langs) == 1 else None
    lang = getattr(model, "language", None)
    if lang is None and callable(getattr(model, "get_params", None)):
        try:
            lang = model.get_params().get("language")
        except Exception:  # a model whose params cannot be listed has no language to report
            lang = None
    return lang.strip().lower() if isinstance(lang, str) and lang.strip() else None


class LanguageCheck:
    """Says which texts are clearly in another language than ``language`` (see the module doc's rule)."""

    def __init__(self, language: str, candidates: Sequence[str] = DEFAULT_CANDIDATES, *,
                 min_words: int = MIN_WORDS, min_share: float = MIN_SHARE, min_margin: float = MIN_MARGIN):
        self.language = language
        self.candidates = tuple(dict.fromkeys([language, *candidates]))
        self.min_words, self.min_share, self.min_margin = min_words, min_share, min_margin
        self.own = detector((language,))
        self.detector = detector(self.candidates)

    @classmethod
    def for_model(cls, model, candidates: Sequence[str] = DEFAULT_CANDIDATES) -> Optional["LanguageCheck"]:
        """The check for ``model``'s language, or None when it has none or simplemma lacks it."""
        lang = model_language(model)
        if lang is None:
            return None
        try:
            if lang not in supported_languages():
                log.debug("simplemma has no %r: texts are not checked for the model's language", lang)
                return None
        except ImportError:
            log.debug("simplemma is not installed: texts are not checked for the model's language")
            return None
        return cls(lang, candidates)

    def foreign(self, text: str) -> Optional[tuple[str, float]]:
        """``(detected language, its share)`` when ``text`` is clearly not in the model's language, else None."""
        own_shares, n = self.own.proportions(text)  # the model's dictionary alone settles most texts, so the
        own = own_shares.get(self.language, 0.0)     # others load only once a text may be foreign
        if n < self.min_words or own > 1.0 - self.min_margin:
            return None
        shares, _ = self.detector.proportions(text)
        best, share = max(((lang, s) for lang, s in shares.items() if lang not in ("unk", self.language)),
                          key=lambda item: item[1], default=(None, 0.0))
        if best is None or share < self.min_share or share - own < self.min_margin:
            return None
        return best, share

    def message(self, found: tuple[str, float]) -> str:
        lang, share = found
        return (f"the text looks like {lang!r} ({share:.0%} of its words), not the model's language"
                f" {self.language!r}: its suggestions may be meaningless")


def warn_foreign_texts(model, texts, lines: Optional[Sequence[int]] = None, *, shown: int = 5,
                       candidates: Sequence[str] = DEFAULT_CANDIDATES) -> int:
    """``xmtc predict``'s warning: log the first ``shown`` texts that are clearly not in ``model``'s language
    (by input line), then how many there were in all and in which languages. Returns that count; 0 without
    a check (feature input, a model trained without ``--language``, simplemma missing)."""
    if not isinstance(texts, list) or not texts or not isinstance(texts[0], str):
        return 0
    check = LanguageCheck.for_model(model, candidates)
    if check is None:
        log.debug("texts are not checked for their language: the model was trained without --language")
        return 0
    found = {}
    for i, text in enumerate(texts):
        hit = check.foreign(text)
        if hit is None:
            continue
        where = lines[i] if lines is not None else i + 1
        if len(found) < shown:
            log.warning("line %s: %s", where, check.message(hit))
        found[where] = hit[0]
    if len(found) > shown:
        counts: dict[str, int] = {}
        for lang in found.values():
            counts[lang] = counts.get(lang, 0) + 1
        langs = ", ".join(f"{lang} {n:,}" for lang, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        log.warning("%s of %s texts look like another language than the model's %r (%s); `xmtc"
                    " detect-language %s FILE --lines` lists them", f"{len(found):,}", f"{len(texts):,}",
                    check.language, langs, ",".join(check.candidates))
    return len(found)
