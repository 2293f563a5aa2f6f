"""Text analyzers for TF-IDF: what a word token becomes before it is counted, and which tokens are dropped.

Why: in an inflected language one subject is spelled many ways ("rautatie", "rautatien", "rautateiden",
"rautateillä" are one Finnish word), and TF-IDF over surface forms splits its evidence over features that
each occur too rarely to be learned. Stemming or lemmatising merges them; dropping stop words keeps "the",
"of", "och" out of the features (and out of ``xmtc explain``).

Analyzers are spelled as Annif spells them, so that an Annif project's setting can be copied:

* ``simple``: the tokenizer's lower-cased word tokens as they are (xmtc's behaviour without an analyzer);
* ``snowball(LANG)``: the Snowball stemmer of PyStemmer (``finnish`` or ``fi``, ``english`` or ``en``, ...);
* ``simplemma(LANG)``: the simplemma lemmatizer (ISO 639-1 codes, 50+ languages);
* ``voikko(fi)``: Finnish base forms from libvoikko (a C library with its own dictionary, optional);

each with an optional ``token_min_length=N`` (``snowball(english,token_min_length=3)``): tokens shorter than
N characters are dropped, as in Annif (whose default is 3; here it is 1, i.e. the tokenizer's own rule of
two or more word characters stands).

How it runs: the TF-IDF tokenizer first turns a batch of texts into ids of distinct surface tokens (a C
scanner); :meth:`Analyzer.apply` then maps each *distinct* token once (stop word? its stem or lemma?), re-interns
the results and rewrites the id stream with one numpy gather, so the stemmer is called once per distinct
word, never per occurrence, and the n-gram and row kernels run unchanged on the analysed ids. A bounded
cache keeps the mappings of earlier batches for prediction and serving.

Stop words come from short lists of closed-class words shipped for English, Finnish, Swedish, German and
Estonian (``xmtc/features/stopwords``); stopwords-iso's long lists are there as ``iso:CODE`` but measured
worse on English, where they hold subject words such as "computer" and "information". They are matched
against the lower-cased surface token, before stemming (lists are of surface forms),
and are removed before n-grams form, as scikit-learn and Annif do: "history of finland" gives the bigram
"history finland". That merges a few bigrams across a removed word, and it is what lets stop-word removal
shrink the feature set rather than only drop unigrams.
"""

from __future__ import annotations

import re
import threading
from importlib import resources
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..errors import ConfigError, SetupError

__all__ = ["AnalyzerSpec", "Analyzer", "parse_analyzer", "resolve", "stop_word_list", "LANGUAGES"]

INSTALL_HINT = "pip install 'xmtc[analyzers]'"

# ISO 639-1 code -> Snowball algorithm name (PyStemmer's), for the languages Snowball has.
SNOWBALL = {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "cs": "czech", "da": "danish",
    "nl": "dutch", "en": "english", "eo": "esperanto", "et": "estonian", "fi": "finnish", "fr": "french",
    "de": "german", "el": "greek", "hi": "hindi", "hu": "hungarian", "id": "indonesian", "ga": "irish",
    "it": "italian", "lt": "lithuanian", "ne": "nepali", "no": "norwegian", "nb": "norwegian", "nn": "norwegian",
    "fa": "persian", "pl": "polish", "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian",
    "st": "sesotho", "es": "spanish", "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}
# simplemma 2.0's languages (checked against the installed simplemma when one is built).
SIMPLEMMA = frozenset(
    "ast bg ca cs cy da de el en enm eo es et fa fi fr ga gd gl grc gv hbs he hi hu hy id is it ka la lb lt lv "
    "mk ml ms nb nl nn pl pt ro ru se sk sl sq sr sv sw tl tr uk".split())
LANGUAGES = frozenset(SNOWBALL) | SIMPLEMMA
# The analyzer --language picks when --analyzer is left at auto (benchmarks/RESULTS.md, "Text analyzers").
# Measured with XR-Linear at defaults and the shipped stop words, P@1 (surface forms without stop words):
# Swedish (yso-finna-sv) snowball 32.23, simplemma 32.21 (28.63), snowball ahead at P@3 and P@5 and ~5x
# faster to analyse; English (yso-finna-en) simplemma 36.83, snowball 36.65 (36.27). Finnish and Estonian,
# reasoned (no data here): consonant gradation and stem alternation (sota/sodan, lapsi/lasten,
# ajalugu/ajaloo) defeat suffix stripping, so Snowball splits one word into several stems where simplemma,
# like Voikko, gives one lemma; Suominen & Koskenniemi's Annif analyzer comparison (Code4Lib Journal 54,
# 2022) found lemmatizers ahead of the Snowball baseline most clearly on Finnish and Swedish. voikko(fi) is
# opt-in: it needs Debian packages. German: Snowball, because tokens are lower-cased before analysis and
# simplemma then reads nouns as verbs (haus -> hausen). Other languages: Snowball where it has them, else
# simplemma.
LANGUAGE_DEFAULT = {**{code: f"snowball({name})" for code, name in SNOWBALL.items()},
                    "en": "simplemma(en)", "fi": "simplemma(fi)", "et": "simplemma(et)"}
# Short closed-class lists shipped in xmtc/features/stopwords/ (why short: see the files' headers).
SHIPPED_STOP_WORDS = ("de", "en", "et", "fi", "sv")
_CACHE_MAX = 500_000  # distinct tokens remembered between batches (~60 MB at most)
_SPEC = re.compile(r"\s*(\w+)\s*(?:\((.*)\))?\s*")


@dataclass(frozen=True)
class AnalyzerSpec:
    """A parsed analyzer setting: ``name``, its language argument and the shortest token kept."""

    name: str
    arg: Optional[str] = None
    token_min_length: int = 1

    def __str__(self) -> str:
        args = [self.arg] if self.arg else []
        if self.token_min_length > 1:
            args.append(f"token_min_length={self.token_min_length}")
        return self.name + (f"({','.join(args)})" if args else "")


def parse_analyzer(spec: str) -> AnalyzerSpec:
    """Parse ``name`` or ``name(arg[,token_min_length=N])``; a bad spec is a one-line ConfigError."""
    if not isinstance(spec, str):
        raise ConfigError(f"analyzer must be a string such as 'snowball(finnish)', got {spec!r}")
    m = _SPEC.fullmatch(spec)
    if m is None:
        raise ConfigError(f"invalid analyzer {spec!r}: expected simple, snowball(LANG), simplemma(LANG) or voikko(fi)")
    name, argstr = m.group(1).lower(), m.group(2)
    pos: list[str] = []
    min_len = 1
    for part in (argstr.split(",") if argstr and argstr.strip() else []):
        key, eq, value = (s.strip() for s in part.partition("="))
        if not eq:
            pos.append(key.lower())
        elif key == "token_min_length" and value.isdigit() and int(value) >= 1:
            min_len = int(value)
        else:
            raise ConfigError(f"analyzer {spec!r}: unknown option {part.strip()!r} (only token_min_length=N, N >= 1)")
    if name == "simple":
        if pos:
            raise ConfigError(f"analyzer {spec!r}: simple takes no language")
        return AnalyzerSpec("simple", None, min_len)
    if name not in ("snowball", "simplemma", "voikko"):
        raise ConfigError(f"unknown analyzer {name!r} in {spec!r}: use simple, snowball(LANG), simplemma(LANG)"
                          " or voikko(fi)")
    if len(pos) != 1 or not pos[0]:
        raise ConfigError(f"analyzer {spec!r}: {name} needs one language, e.g. {name}({_EXAMPLE[name]})")
    lang = pos[0]
    if name == "snowball":
        lang = SNOWBALL.get(lang, lang)
        if lang not in set(SNOWBALL.values()) | {"porter", "dutch_porter"}:
            raise ConfigError(f"analyzer {spec!r}: Snowball has no language {pos[0]!r}; it has "
                              f"{', '.join(sorted(set(SNOWBALL.values())))}")
    elif name == "simplemma" and lang not in SIMPLEMMA:
        raise ConfigError(f"analyzer {spec!r}: simplemma has no language {lang!r} (ISO 639-1 codes: "
                          f"{', '.join(sorted(SIMPLEMMA))})")
    elif name == "voikko" and lang not in ("fi", "finnish"):
        raise ConfigError(f"analyzer {spec!r}: voikko analyses Finnish only: voikko(fi)")
    return AnalyzerSpec(name, "fi" if name == "voikko" else lang, min_len)


_EXAMPLE = {"snowball": "finnish", "simplemma": "fi", "voikko": "fi"}


def check_language(language: Optional[str]) -> Optional[str]:
    """The ISO 639-1 code, lower-cased; an unknown one is a one-line ConfigError."""
    if language is None:
        return None
    code = language.strip().lower()
    if code not in LANGUAGES:
        raise ConfigError(f"unknown language {language!r}: give an ISO 639-1 code such as en, fi, sv, de, et"
                          f" (known: {', '.join(sorted(LANGUAGES))})")
    return code


def check_stop_words(stop_words: str) -> str:
    """'auto', 'none', a language with a shipped list (code or English name: 'fi', 'finnish') or 'iso:CODE'
    (stopwords-iso's list); returns 'auto', 'none', the code or 'iso:CODE'. Else a one-line ConfigError."""
    value = stop_words.strip().lower() if isinstance(stop_words, str) else stop_words
    if value in ("auto", "none"):
        return value
    if isinstance(value, str) and value.startswith("iso:") and len(value) > 4:
        return value
    names = {v: k for k, v in SNOWBALL.items() if k not in ("nb", "nn")}
    code = names.get(value, value)
    if code not in SHIPPED_STOP_WORDS:
        raise ConfigError(f"stop_words must be auto, none, one of {', '.join(SHIPPED_STOP_WORDS)} (or english,"
                          f" finnish, ...) or iso:CODE for stopwords-iso's list; got {stop_words!r}")
    return code


def resolve(analyzer: str, language: Optional[str], stop_words: str) -> tuple[str, Optional[list[str]]]:
    """The featurizer's settings from the user's: (analyzer spec, sorted stop-word list or None).

    ``analyzer="auto"`` is ``simple`` without a language and :data:`LANGUAGE_DEFAULT` (else simplemma) with
    one; ``stop_words="auto"`` is the language's shipped list (none for a language without one, or without
    a language); ``"none"`` is none; a language or ``iso:CODE`` gives that list whatever ``language`` says.
    """
    code = check_language(language)
    sw = check_stop_words(stop_words)
    if analyzer.strip().lower() == "auto":
        if code is None:
            spec = AnalyzerSpec("simple")
        else:
            spec = parse_analyzer(LANGUAGE_DEFAULT.get(code) or f"simplemma({code})")
    else:
        spec = parse_analyzer(analyzer)
    words = None
    if sw == "auto" and code in SHIPPED_STOP_WORDS:
        words = stop_word_list(code)
    elif sw not in ("auto", "none"):
        words = stop_word_list(sw)
    return str(spec), words


def stop_word_list(name: str) -> list[str]:
    """Sorted stop words: a shipped list by language code, or ``iso:CODE`` from the stopwordsiso package."""
    if name.startswith("iso:"):
        try:
            import stopwordsiso
        except ImportError:
            raise SetupError(f"stop_words {name!r} needs the stopwordsiso package: {INSTALL_HINT}") from None
        if not stopwordsiso.has_lang(name[4:]):
            raise SetupError(f"stop_words {name!r}: stopwords-iso has no list for {name[4:]!r}")
        return sorted(stopwordsiso.stopwords(name[4:]))
    if name not in SHIPPED_STOP_WORDS:
        raise SetupError(f"no shipped stop-word list for {name!r} (shipped: {', '.join(SHIPPED_STOP_WORDS)});"
                          f" try iso:{name}")
    text = resources.files(__package__).joinpath("stopwords", f"{name}.txt").read_text("utf-8")
    return sorted({w.strip() for w in text.splitlines() if w.strip() and not w.startswith("#")})


def _snowball(lang: str) -> Callable[[list[str]], list[str]]:
    try:
        import Stemmer
    except ImportError:
        raise SetupError(f"analyzer snowball({lang}) needs PyStemmer: {INSTALL_HINT}") from None
    try:
        stemmer = Stemmer.Stemmer(lang, 0)  # no internal cache: Analyzer keeps its own
    except (KeyError, ValueError):
        raise SetupError(f"analyzer snowball({lang}): the installed PyStemmer has no Snowball stemmer for"
                         f" {lang!r}") from None
    lock = threading.Lock()  # PyStemmer's objects are not thread-safe

    def stems(words: list[str]) -> list[str]:
        with lock:
            return stemmer.stemWords(words)
    return stems


def _simplemma(lang: str) -> Callable[[list[str]], list[str]]:
    try:
        import simplemma
    except ImportError:
        raise SetupError(f"analyzer simplemma({lang}) needs simplemma: {INSTALL_HINT}") from None
    lemmatize = simplemma.lemmatize
    try:
        lemmatize("test", lang=lang)
    except ValueError:
        raise SetupError(f"analyzer simplemma({lang}): the installed simplemma has no language"
                         f" {lang!r}") from None
    return lambda words: [lemmatize(w, lang=lang) for w in words]


def _voikko(lang: str) -> Callable[[list[str]], list[str]]:
    hint = ("analyzer voikko(fi) needs libvoikko and its Finnish dictionary: apt-get install libvoikko1 voikko-fi"
            " && pip install libvoikko")
    try:
        import libvoikko
    except ImportError:
        try:
            from voikko import libvoikko
        except ImportError:
            raise SetupError(hint) from None

    class Voikko(libvoikko.Voikko):
        def __del__(self):  # libvoikko's own fails on an instance whose library did not load
            try:
                super().__del__()
            except AttributeError:
                pass

    try:
        voikko = Voikko(lang)
    except (OSError, libvoikko.VoikkoException) as exc:
        raise SetupError(f"{hint} ({str(exc).strip() or type(exc).__name__})") from None
    lock = threading.Lock()  # a Voikko handle is not thread-safe

    def baseforms(words: list[str]) -> list[str]:
        out = []
        with lock:
            for w in words:
                result = voikko.analyze(w)
                out.append(result[0].get("BASEFORM", w) if result else w)
        return out
    return baseforms


_BUILDERS = {"snowball": _snowball, "simplemma": _simplemma, "voikko": _voikko}


class Analyzer:
    """Maps distinct tokens to their analysed forms (None = dropped) and rewrites token-id streams.

    Built from a spec string and an optional stop-word list; raises ConfigError when the spec is invalid
    or the library it needs is missing. Safe to share between threads: the cache only grows (one dict
    update) or is replaced whole, never cleared under a reader, and the stemmer's and Voikko's handles are
    behind locks.
    """

    def __init__(self, spec: str, stop_words: Optional[list[str]] = None, lowercase: bool = True):
        self.spec = parse_analyzer(spec)
        self.stop_words = frozenset(stop_words or ())
        self.lowercase = lowercase
        build = _BUILDERS.get(self.spec.name)
        self._normalize = build(self.spec.arg) if build else None
        self._cache: dict[str, Optional[str]] = {}

    @property
    def is_identity(self) -> bool:
        """True when analysis changes nothing (simple, no stop words, no length rule)."""
        return self._normalize is None and not self.stop_words and self.spec.token_min_length <= 1

    def _analyse(self, words: list[str]) -> list[Optional[str]]:
        stop, min_len, lower = self.stop_words, self.spec.token_min_length, self.lowercase
        keep = [w for w in words if len(w) >= min_len and w not in stop and (lower or w.lower() not in stop)]
        forms = self._normalize(keep) if self._normalize is not None and keep else keep
        mapped = {}
        for w, f in zip(keep, forms):
            if lower:
                f = f.lower()
            # a form that is empty or holds whitespace would break n-grams: keep the token as it was
            mapped[w] = f if f and not any(c.isspace() for c in f) else w
        return [mapped.get(w) for w in words]

    def normalize(self, words: list[str]) -> list[Optional[str]]:
        """Analysed form of each word, None for a dropped one (stop word or too short)."""
        cache = self._cache
        missing = [w for w in words if w not in cache]
        if not missing:
            return [cache[w] for w in words]
        fresh = dict(zip(missing, self._analyse(missing)))
        if len(cache) + len(fresh) <= _CACHE_MAX:
            cache.update(fresh)
        elif len(fresh) <= _CACHE_MAX:
            self._cache = fresh  # replaced, never cleared: a concurrent reader keeps the old dict
        return [fresh[w] if w in fresh else cache[w] for w in words]

    def apply(self, tok: np.ndarray, doc_ptr: np.ndarray, strings: list[str]
              ) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Rewrite a tokenizer's (token ids, text offsets, distinct strings) into analysed ones.

        Each distinct string is analysed once; dropped tokens are cut out of the stream (so n-grams form
        across them) and the text offsets shrink accordingly.
        """
        forms = self.normalize(strings)
        remap = np.empty(len(strings), np.int32)
        index: dict[str, int] = {}
        out: list[str] = []
        for i, f in enumerate(forms):
            if f is None:
                remap[i] = -1
                continue
            j = index.get(f)
            if j is None:
                j = index[f] = len(out)
                out.append(f)
            remap[i] = j
        new = remap[tok] if len(tok) else tok.astype(np.int32)
        if len(out) < len(strings) and any(f is None for f in forms):
            keep = new >= 0
            cum = np.zeros(len(new) + 1, np.int64)
            np.cumsum(keep, out=cum[1:])
            doc_ptr = cum[doc_ptr]
            new = new[keep]
        return new, doc_ptr, out
