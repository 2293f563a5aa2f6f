"""Label files in the wrong layout, training files with swapped columns, and `labels add` with a new release of
a vocabulary (xmtc/data/label_layout.py, xmtc/data/formats.py, xmtc/models/open_labels.py: add_labels)."""

import gzip
import logging

import numpy as np
import pytest

import xmtc
from xmtc.cli import main
from xmtc.data import LabelVocab, read_dataset, read_label_file, sample_path
from xmtc.data.label_layout import EXPECTED
from xmtc.errors import DataFormatError
from xmtc.models.open_labels import LabelChanges, add_labels

YSO_HEADER = "#id\turi\tprefLabel\tlabel_text\n"


def put(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# -- refused layouts: one line naming the label file, the line and the expected columns ----------------------
REFUSED = [
    # (name, content, ids, line, problem)
    ("csv-header.csv", "id,uri,prefLabel\np1,http://x/p1,trains\n", None, 1,
     "a comma-separated header 'id,uri,prefLabel' without '#'"),
    ("hash-csv.csv", "#id,uri,prefLabel\np1,http://x/p1,trains\n", None, 1,
     "comma-separated header '#id,uri,prefLabel'"),
    ("csv.csv", "p1,http://x/p1,trains\np2,http://x/p2,birds\n", ["p1", "p2"], 1,
     "no tab in 'p1,http://x/p1,trains': a one-column file names label ids 0, 1, 2, ... in order, but the"
     " labels are ids such as 'p1'"),
    ("header.tsv", "id\tname\np1\ttrains\n", None, 1, "a header row 'id\\tname' without '#'"),
    ("yso-no-hash.tsv", YSO_HEADER[1:] + "p1\tu\ttrains\ttrains\n", None, 1,
     "a header row 'id\\turi\\tprefLabel\\tlabel_text' without '#'"),
    ("swapped.tsv", "trains\tp1\nbirds\tp2\n", ["p1", "p2"], 1,
     "the first column holds 'trains', but column 2 holds the label id 'p1' (columns swapped?)"),
    ("swapped-text.tsv", "steam trains\tp1\nbirds of finland\tp2\n", None, 1,
     "the first column holds text ('steam trains'), column 2 ids such as 'p1' (columns swapped?)"),
    ("no-tab.tsv", "p1\ttrains\np2,birds\n", None, 2, "no tab in 'p2,birds'"),
    ("spaces.tsv", "p1\ttrains\np2 birds of finland\n", None, 2, "no tab in 'p2 birds of finland'"),
]


@pytest.mark.parametrize("name,content,ids,line,problem", REFUSED, ids=[r[0] for r in REFUSED])
def test_label_file_in_a_wrong_layout_is_refused_at_its_line(tmp_path, name, content, ids, line, problem):
    path = put(tmp_path / name, content)
    with pytest.raises(DataFormatError) as info:
        read_label_file(path, ids)
    assert str(info.value) == f"{path}:{line}: {problem}; {EXPECTED}"


def test_expected_columns_are_named():
    assert EXPECTED == ("expected tab-separated columns 'id, uri, prefLabel, label_text[, n_docs]' under a '#'"
                        " header line, or 'id, name[, text]'")


# -- layouts that stay valid --------------------------------------------------------------------------------
ACCEPTED = [
    # (content, ids, expected read_label_file)
    ("p1\tsteam trains\np2\tbirds of finland\n", ["p1", "p2"],
     {"p1": ("steam trains", "steam trains"), "p2": ("birds of finland", "birds of finland")}),
    ("id\tIndonesian\nfi\tFinnish\n", ["id", "fi"],                # one header-like cell is a label id
     {"id": ("Indonesian", "Indonesian"), "fi": ("Finnish", "Finnish")}),
    ("p1\ttrains\np2\n", ["p1", "p2"], {"p1": ("trains", "trains"), "p2": ("", "")}),    # a bare id, no name
    ("light reading\tLight reading\tlight reading fiction\n", ["light reading"],         # ids with spaces
     {"light reading": ("Light reading", "light reading fiction")}),
    ("acq\t1650\t719\nalum\t35\t23\n", ["35", "acq"], {"acq": ("", ""), "alum": ("", "")}),  # counts, not ids
    ("TAG_2005\nTAG_a, b\n", ["0", "1"], {"0": ("TAG_2005", "TAG_2005"), "1": ("TAG_a, b", "TAG_a, b")}),
    ("steam trains\tp1\n", ["steam trains"], {"steam trains": ("p1", "p1")}),   # ids with spaces, found in data
    (YSO_HEADER + "p1\thttp://x/p1\tTrains\tsteam trains\n", ["p1"], {"p1": ("Trains", "steam trains")}),
]


@pytest.mark.parametrize("content,ids,expected", ACCEPTED)
def test_legitimate_layouts_are_read(tmp_path, content, ids, expected):
    assert read_label_file(put(tmp_path / "labels.tsv", content), ids) == expected


def test_real_label_files_read_with_their_data():
    ds = read_dataset(sample_path("train"), label_file=sample_path("labels"))
    assert len(ds.labels) == 1000 and all(ds.labels.display)


# -- the CLI names the label file -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A 600-document training file (p1-p3, three words each) and two releases of its label vocabulary."""
    d = tmp_path_factory.mktemp("label_files")
    words = {"p1": "railways trains", "p2": "birds ornithology", "p3": "fishing angling"}
    rng = np.random.default_rng(0)
    put(d / "train.tsv", "".join(f"{lab}\t{words[lab]} {' '.join(rng.choice(list('abcdefgh'), 3))}\n"
                                 for lab in ("p1", "p2", "p3") * 200))
    put(d / "v1.tsv", YSO_HEADER + "p1\thttp://x/p1\tRailways\trailways trains\n"
                                   "p2\thttp://x/p2\tBirds\tbirds ornithology\n"
                                   "p3\thttp://x/p3\tFishing\tfishing angling\n"
                                   "p4\thttp://x/p4\tCastles\tcastles fortresses\n")
    put(d / "v2.tsv", YSO_HEADER + "p1\thttp://x/p1\tRail transport\trailways trains rail transport\n"
                                   "p2\thttp://x/p2\tBirds\tbirds ornithology\n"
                                   "p3\thttp://x/p3\tFishing\tfishing angling\n"
                                   "p4\thttp://x/p4\tCastles\tmedieval castles keeps\n"
                                   "p5\thttp://x/p5\tMushrooms\tmushrooms fungi\n")
    assert main(["train", str(d / "train.tsv"), "--label-file", str(d / "v1.tsv"), "-o", str(d / "m"),
                 "--n-trees", "1", "-q"]) == 0
    return d


def test_train_names_the_label_file_its_line_and_the_expected_columns(files, tmp_path, capsys):
    bad = put(tmp_path / "labels.csv", "id,uri,prefLabel\np1,http://x/p1,trains\n")
    assert main(["train", str(files / "train.tsv"), "--label-file", str(bad), "-o", str(tmp_path / "m"), "-q"]) == 2
    assert capsys.readouterr().err == (f"xmtc: error: {bad}:1: a comma-separated header 'id,uri,prefLabel'"
                                       f" without '#'; {EXPECTED}\n")
    swapped = put(tmp_path / "swapped.tsv", "Railways\tp1\nBirds\tp2\n")
    assert main(["train", str(files / "train.tsv"), "--label-file", str(swapped), "-o", str(tmp_path / "m"),
                 "-q"]) == 2
    assert capsys.readouterr().err == (f"xmtc: error: {swapped}:1: the first column holds 'Railways', but column"
                                       f" 2 holds the label id 'p1' (columns swapped?); {EXPECTED}\n")
    assert not (tmp_path / "m").exists()


def test_a_label_file_without_names_or_texts_is_named_not_the_training_file(files, tmp_path, capsys):
    """Reuters' own labels file (``name, n_train, n_test``) reads as ids without a text: the label-text route would
    have nothing to learn from, and the error used to blame the training file."""
    counts = put(tmp_path / "counts.tsv", "p1\t200\t70\np2\t200\t71\np3\t200\t69\n")
    assert main(["train", str(files / "train.tsv"), "--label-file", str(counts), "-o", str(tmp_path / "m"),
                 "-q"]) == 2
    assert capsys.readouterr().err == (f"xmtc: error: {counts}: gives none of the 3 labels of the training data a"
                                       " name or text (only ids, or ids and numbers): a label file is 'id, name[,"
                                       " text]' or columns named by a '#' header line; leave --label-file out to"
                                       " train without label texts\n")
    empty = put(tmp_path / "empty.tsv", "")
    assert main(["train", str(files / "train.tsv"), "--label-file", str(empty), "-o", str(tmp_path / "m"),
                 "-q"]) == 2
    assert capsys.readouterr().err == (f"xmtc: error: {empty}: holds no label: expected a line per label, 'id,"
                                       " name[, text]' or columns named by a '#' header line\n")
    assert main(["labels", "add", str(files / "m"), str(empty), "-q"]) == 2
    assert f"xmtc: error: {empty}: holds no label" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_labels_add_refuses_a_csv_header_and_leaves_the_model_alone(files, tmp_path, capsys):
    bad = put(tmp_path / "new.csv", "id,name\np9,castles\n")
    before = (files / "m" / "manifest.json").read_bytes()
    assert main(["labels", "add", str(files / "m"), str(bad), "-q"]) == 2
    assert capsys.readouterr().err == (f"xmtc: error: {bad}:1: a comma-separated header 'id,name' without '#';"
                                       f" {EXPECTED}\n")
    swapped = put(tmp_path / "swapped.tsv", "Castles\tp4\nMushrooms\tp5\n")   # p4: a label of the model
    assert main(["labels", "add", str(files / "m"), str(swapped), "-q"]) == 2
    assert capsys.readouterr().err == (f"xmtc: error: {swapped}:1: the first column holds 'Castles', but column 2"
                                       f" holds the label id 'p4' (columns swapped?); {EXPECTED}\n")
    assert (files / "m" / "manifest.json").read_bytes() == before


# -- a training file with its columns swapped ----------------------------------------------------------------
def test_a_training_file_whose_labels_look_like_text_gets_a_warning(tmp_path, caplog):
    titles = [f"history of the railways part {i}" for i in range(12)]
    swapped = put(tmp_path / "swapped.tsv", "".join(f"{t}\tp{i % 3}\n" for i, t in enumerate(titles)))
    with caplog.at_level(logging.WARNING, logger="xmtc.data.formats"):
        read_dataset(swapped)
    assert caplog.messages == [f"{swapped}: the labels column looks like text (12 of 12 label names contain spaces"
                               " and almost none repeats, e.g. 'history of the railways part 0'): are the"
                               " columns swapped? expected 'label1,label2<TAB>text'"]
    caplog.clear()
    right = put(tmp_path / "right.tsv", "".join(f"p{i % 3}\t{t}\n" for i, t in enumerate(titles)))
    with caplog.at_level(logging.WARNING, logger="xmtc.data.formats"):
        read_dataset(right)
        read_dataset(sample_path("train"))
    assert caplog.messages == []


@pytest.mark.parametrize("header", ["labels\ttext", "Tags\tTitle", "label\tdocument"])
def test_a_header_row_is_refused_at_its_line(tmp_path, header):
    path = put(tmp_path / "with_header.tsv", f"{header}\np1\tsteam trains\n")
    with pytest.raises(DataFormatError) as info:
        read_dataset(path)
    head, text = header.split("\t")
    assert str(info.value) == (f"{path}:1: a header row ({head!r}, {text!r}), but the TSV layout has none: every"
                               " line is 'label1,label2<TAB>text'; remove it (tail -n +2)")
    # the same words further down are a document, and a first line that is not both header words reads as data
    assert read_dataset(put(tmp_path / "later.tsv", f"p1\tsteam trains\n{header}\n")).label_lists()[1] == [head]
    assert len(read_dataset(put(tmp_path / "label.tsv", "labels\tthe labels of jam jars\n"))) == 1


def test_a_csv_file_is_named_as_csv(tmp_path):
    path = put(tmp_path / "products.csv", 'labels,text\n"p1","steam trains"\n')
    with pytest.raises(DataFormatError) as info:
        read_dataset(path)
    assert str(info.value) == (f"{path}:1: no labels found: this looks like CSV (commas, no tab); xmtc reads TSV"
                               " 'label1,label2<TAB>text' or JSONL: convert it first (the tagging guide shows how)")
    plain = put(tmp_path / "plain.txt", "steam trains\nbirds of finland\n")
    with pytest.raises(DataFormatError) as info:
        read_dataset(plain)
    assert "no labels found: expected TSV" in str(info.value)


def test_a_long_text_in_the_labels_column_is_named_as_such(tmp_path):
    text = "Steam trains of Finland, , a history of the railways from 1862 to the present day"
    path = put(tmp_path / "swapped.tsv", f"{text}\tp1\n")
    with pytest.raises(DataFormatError) as info:
        read_dataset(path)
    assert str(info.value) == (f"{path}:1: empty label name in '{text[:60]}...' (is the first column a text?"
                               " expected 'label1,label2<TAB>text')")


# -- labels add: a new release of the vocabulary ---------------------------------------------------------------
def test_labels_add_takes_a_new_release_adds_updates_and_restores(files, tmp_path, capsys):
    import shutil

    m = tmp_path / "m"
    shutil.copytree(files / "m", m)
    assert main(["labels", "remove", str(m), str(put(tmp_path / "ids.txt", "p3\n")), "-q"]) == 0
    before = xmtc.load(m)
    assert before.label_route_.label_ids.tolist() == [3]                # p4: a text and no document
    assert main(["labels", "add", str(m), str(files / "v2.tsv"), "-q"]) == 0
    assert capsys.readouterr().out == "added 1, updated 2, unchanged 2 labels (1 removed label restored)\n"
    after = xmtc.load(m)
    v = after.labels_
    assert v.names == ["p1", "p2", "p3", "p4", "p5"]
    assert v.display == ["Rail transport", "Birds", "Fishing", "Castles", "Mushrooms"]
    assert v.texts == ["railways trains rail transport", "birds ornithology", "fishing angling",
                       "medieval castles keeps", "mushrooms fungi"]
    assert v.uris == [f"http://x/p{i}" for i in range(1, 6)]
    assert after.label_counts_.tolist() == [200, 200, 200, 0, 0] and after.removed_ is None  # no label masked
    # p4 re-routed by its new text, p5 routed; p1 (learned from documents) keeps its ranker, never routed
    route = after.label_route_
    assert route.label_ids.tolist() == [4, 3]
    expected = route.featurizer.transform(["medieval castles keeps"]).toarray()
    np.testing.assert_allclose(route.M[1].toarray(), expected, rtol=1e-6)
    assert after.predict(["medieval castles keeps"], k=1)[0][0][0] == "p4"
    # the same release again: nothing to do
    assert main(["labels", "add", str(m), str(files / "v2.tsv"), "-q"]) == 0
    assert capsys.readouterr().out == "added 0, updated 0, unchanged 5 labels\n"


def test_add_labels_keeps_what_the_file_leaves_empty(files):
    model = xmtc.load(files / "m")
    changes = add_labels(model, LabelVocab(["p1", "p2"], display=["", "Avian"], texts=["", "Avian"],
                                           uris=["", ""]))
    assert (changes.added, changes.updated, changes.unchanged, changes.restored) == (0, 1, 1, 0)
    assert model.labels_.display[:2] == ["Railways", "Avian"] and model.labels_.uris[:2] == ["http://x/p1",
                                                                                             "http://x/p2"]
    assert model.labels_.texts[:2] == ["railways trains", "Avian"]
    assert model.label_route_.label_ids.tolist() == [3]                 # p2 has documents: not routed


def test_label_changes_is_the_count_of_labels_made_suggestable():
    changes = LabelChanges(added=2, updated=3, unchanged=4, restored=1)
    assert changes == 3 and repr(changes) == "LabelChanges(added=2, updated=3, unchanged=4, restored=1)"
    assert changes.summary() == "added 2, updated 3, unchanged 4 labels (1 removed label restored)"
    assert LabelChanges(1_500, 0, 2, 2).summary() == "added 1,500, updated 0, unchanged 2 labels (2 removed" \
                                                      " labels restored)"


def test_a_method_with_native_label_texts_adds_new_and_renames_known_labels(caplog):
    from xmtc.methods.label_text.estimator import LabelText

    vocab = LabelVocab(["p1", "p2"], display=["Railways", "Mushrooms"], texts=["railways", "mushrooms fungi"])
    model = LabelText().fit(["history of railways", "mushrooms of medieval castles"], [["p1"], ["p2"]], labels=vocab,
                            progress=False)
    new = LabelVocab(["p2", "p1", "p3"], display=["Fungi", "Railways", "Castles"],
                     texts=["fungi mycology", "railways", "medieval castles"])
    with caplog.at_level(logging.WARNING, logger="xmtc.models.open_labels"):
        changes = add_labels(model, new)
    assert (changes.added, changes.updated, changes.unchanged, changes.restored) == (1, 1, 1, 0)
    assert model.labels_.names == ["p1", "p2", "p3"] and model.labels_.display == ["Railways", "Fungi", "Castles"]
    assert model.labels_.texts == ["railways", "fungi mycology", "medieval castles"]
    assert model.label_counts_.tolist() == [1, 1, 0]
    assert model.predict(["castles"], k=1)[0][0][0] == "p3"
    assert caplog.messages == ["1 known label got a new text: this label-text model scores by the texts it"
                               " indexed until it is trained again"]


def test_gzip_label_file_errors_name_the_gz_path(tmp_path):
    path = tmp_path / "labels.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("id\tname\np1\ttrains\n")
    with pytest.raises(DataFormatError) as info:
        read_label_file(path)
    assert str(info.value) == f"{path}:1: a header row 'id\\tname' without '#'; {EXPECTED}"


def test_the_dual_encoder_adds_new_labels_and_renames_known_ones(tiny_bert, caplog):
    texts = ["steam trains of finland", "railway history", "wild mushrooms", "mushrooms and fungi"] * 4
    labels = [["p1"], ["p1"], ["p2"], ["p2"]] * 4
    vocab = LabelVocab(["p1", "p2"], display=["Railways", "Mushrooms"], texts=["railways trains", "mushrooms"])
    model = xmtc.DualEncoder(encoder=tiny_bert, max_length=16, label_max_length=8, epochs=1, batch_size=8,
                             n_threads=1, valid_size=0, seed=0).fit(texts, labels, labels=vocab, progress=False)
    new = LabelVocab(["p1", "p2", "p3"], display=["Rail transport", "Mushrooms", "Lighthouses"],
                     texts=["railways trains", "mushrooms fungi", "lighthouses of the baltic coast"])
    with caplog.at_level(logging.WARNING, logger="xmtc.models.open_labels"):
        changes = add_labels(model, new)
    assert (changes.added, changes.updated, changes.unchanged, changes.restored) == (1, 2, 0, 0)
    assert model.labels_.display == ["Rail transport", "Mushrooms", "Lighthouses"]
    assert model.labels_.texts == ["railways trains", "mushrooms fungi", "lighthouses of the baltic coast"]
    assert model.label_counts_.tolist() == [8, 8, 0] and len(model.network_.index) == 3
    assert model.predict(["lighthouses of the baltic coast"], 1)[0][0][0] == "p3"
    assert caplog.messages == ["1 known label got a new text: this dual-encoder model scores by the texts it"
                               " indexed until it is trained again"]


@pytest.mark.parametrize("layout", ["#id\tprefLabel\tlabel_text\np1\trailways\tthe railways\np2\tboats\tboats\n",
                                    "p1\trailways\tthe railways\np2\tboats\tboats\n"])
def test_a_label_file_saved_with_a_utf8_bom_reads_as_without_it(tmp_path, layout):
    # Excel's "UTF-8" CSV/TSV and Notepad put EF BB BF before the first line: it is no part of the first label id
    plain, bom = tmp_path / "plain.tsv", tmp_path / "bom.tsv"
    plain.write_text(layout, encoding="utf-8")
    bom.write_bytes(b"\xef\xbb\xbf" + layout.encode("utf-8"))
    want = {"p1": ("railways", "the railways"), "p2": ("boats", "boats")}
    assert read_label_file(plain) == want and read_label_file(bom) == want
    assert read_label_file(bom, ["p1", "p2"]) == want
    gz = tmp_path / "bom.tsv.gz"
    gz.write_bytes(gzip.compress(bom.read_bytes()))
    assert read_label_file(gz) == want
