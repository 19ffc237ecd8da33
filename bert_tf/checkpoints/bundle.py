"""TensorFlow's checkpoint files, checked without TensorFlow: a checkpoint `PREFIX` is
`PREFIX.index` (a table of every tensor's data shard, offset, size and checksum) and
`PREFIX.data-SSSSS-of-NNNNN`, the tensors' bytes; a folder's `checkpoint` state file names
the latest prefix.

Every reader of these files (google's TF1 checkpoints, TF2 object-based ones: a
run_pretraining folder, Model Garden's; a SavedModel's variables; a fine-tuning run's
resumable state) calls `check_bundle` first: a missing index, an index that is not one,
a missing data shard or one shorter than its index says is refused in one line that names
the file, before TensorFlow reads a byte (it would raise `IndexError: Read less bytes than
requested` for a cut .data file, from deep inside a restore). `read_failure` says in a few
words what TensorFlow's own read error means (a flipped byte fails a tensor's checksum
only when that tensor is read). `latest_prefix` reads the state file as
tf.train.latest_checkpoint does, without its ERROR lines for a prefix that is gone.

The index is a LevelDB-style table (TensorFlow's tensorflow/core/lib/io/table): a footer
with the index block's place, blocks of prefix-compressed entries each followed by a type
byte and a masked CRC32C; an entry's value is a BundleEntryProto (tensor_bundle.proto),
read here from its protobuf fields 3 (shard_id), 4 (offset) and 5 (size); the entry of
the empty key is the BundleHeaderProto, whose field 1 is the number of shards.
"""

import codecs
import os
import re
import struct

from bert_tf.base.tf_logs import tf_error_text
from bert_tf.base.tfrecord import crc32c, masked_crc

_FOOTER = 48                     # two block handles, padded to 40 bytes, and the magic
_MAGIC = 0xDB4775248B80FB57      # table::kTableMagicNumber
_STATE_FILE = "checkpoint"


class _Damaged(Exception):
    """The index's bytes are not a table (what is wrong, in words). `sure`: they cannot
    be a whole index (cut, a checksum that fails); otherwise they may be a layout this
    reader does not know, and only a checksum can tell."""

    def __init__(self, reason, sure=False):
        super().__init__(reason)
        self.sure = sure


class _Unknown(Exception):
    """An index this reader cannot read, though nothing says it is damaged."""


def _varint(data, at):
    """(value, next position) of the base-128 varint at `at`."""
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise _Damaged("a number runs past its block")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def _block(data, offset, size, checked=False):
    """A block's contents; with `checked`, its checksum checked too (slow in Python: done
    only where the index is about to be found at fault or to blame a data file)."""
    end = offset + size
    if end + 5 > len(data):
        raise _Damaged(f"a block at byte {offset:,} runs past the end of the file", True)
    contents, kind = data[offset:end], data[end]
    (stored,) = struct.unpack("<I", data[end + 1:end + 5])
    # A block this reader cannot parse (compressed: snappy) is checked here too: whole,
    # it is TensorFlow's to read.
    if (checked or kind != 0) and masked_crc(crc32c(contents + bytes([kind]))) != stored:
        raise _Damaged(f"the block at byte {offset:,} fails its checksum", True)
    if kind != 0:
        raise _Unknown()
    return contents


def _entries(block):
    """(key, value) of a block's entries."""
    if len(block) < 4:
        raise _Damaged("a block too short for its restart count")
    (restarts,) = struct.unpack("<I", block[-4:])
    end = len(block) - 4 - 4 * restarts
    if end < 0:
        raise _Damaged("a block's restart count is larger than the block")
    key, at = b"", 0
    while at < end:
        shared, at = _varint(block, at)
        unshared, at = _varint(block, at)
        length, at = _varint(block, at)
        if shared > len(key) or at + unshared + length > end:
            raise _Damaged("an entry runs past its block")
        key = key[:shared] + block[at:at + unshared]
        at += unshared
        yield key, block[at:at + length]
        at += length


def _fields(message):
    """{field number: last value} of a protobuf message's varint fields (the others
    skipped)."""
    fields, at = {}, 0
    while at < len(message):
        tag, at = _varint(message, at)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            fields[number], at = _varint(message, at)
        elif wire == 1:
            at += 8
        elif wire == 2:
            length, at = _varint(message, at)
            at += length
        elif wire == 5:
            at += 4
        else:
            raise _Damaged(f"a tensor entry with wire type {wire}")
        if at > len(message):
            raise _Damaged("a tensor entry runs past its value")
    return fields


def data_file(prefix, shard, shards):
    """The name of data shard `shard` of `shards` of the checkpoint `prefix`."""
    return f"{prefix}.data-{shard:05d}-of-{shards:05d}"


def bundle_extent(prefix, checked=False):
    """{data file: the bytes it must hold at least} of the checkpoint `prefix`, read from
    its index (every data shard the index names, a tensor-less one with 0); None for an
    index whose blocks are whole but not of the layout read here (compressed ones). A
    ValueError `INDEX: what is wrong` when the index is missing, cut, or (`checked`, or
    when its entries do not parse) a block fails its checksum."""
    index = prefix + ".index"
    try:
        with open(index, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ValueError(f"{index}: missing (a TensorFlow checkpoint is read through its "
                         f"index; copied without it?)") from None
    try:
        if len(data) < _FOOTER:
            raise _Damaged(f"{len(data):,} bytes, shorter than a table's footer", True)
        (magic,) = struct.unpack("<Q", data[-8:])
        if magic != _MAGIC:
            raise _Damaged("no table footer at its end", True)
        footer = data[-_FOOTER:]
        _, at = _varint(footer, _varint(footer, 0)[1])       # the metaindex handle
        index_offset, at = _varint(footer, at)
        index_size, _ = _varint(footer, at)
        shards, ends = 1, {}
        for _, handle in _entries(_block(data, index_offset, index_size, checked)):
            offset, at = _varint(handle, 0)
            size, _ = _varint(handle, at)
            for key, value in _entries(_block(data, offset, size, checked)):
                fields = _fields(value)
                if key == b"":
                    shards = fields.get(1, 1)
                elif fields.get(5):
                    shard = fields.get(3, 0)
                    ends[shard] = max(ends.get(shard, 0), fields.get(4, 0) + fields[5])
        if shards < 1 or any(shard >= shards for shard in ends):
            raise _Damaged(f"tensors in shards outside the {shards} it declares")
    except _Unknown:
        return None
    except _Damaged as e:
        if not (e.sure or checked):
            return bundle_extent(prefix, checked=True)    # a checksum tells
        if not e.sure:
            return None       # whole blocks this reader cannot read: TensorFlow's to say
        raise ValueError(f"{index}: damaged, {e} (not a checkpoint index, or cut "
                         f"short)") from None
    return {data_file(prefix, shard, shards): ends.get(shard, 0) for shard in range(shards)}


def bundle_damage(prefix, folder=None):
    """What keeps the checkpoint `prefix` from being read whole, in words naming the file
    (relative to `folder`, default the checkpoint's), or None: its index missing or
    damaged, a data shard missing, or shorter than the index says (cut short; an empty
    file too). A byte changed inside a tensor's data is found when TensorFlow reads it
    (its checksum: `read_failure`)."""
    if "://" in prefix:
        return None         # a file system of TensorFlow's: its reads say what is wrong
    folder = folder or os.path.dirname(prefix)
    try:
        extent = bundle_extent(prefix)
        if extent and any(not os.path.exists(p) or os.path.getsize(p) < n
                          for p, n in extent.items()):
            extent = bundle_extent(prefix, checked=True)   # the index is not to blame?
    except ValueError as e:      # `INDEX: what` -> `FILE is what`
        path, _, what = str(e).partition(": ")
        return f"{os.path.relpath(path, folder)} is {what}"
    for path, needed in (extent or {}).items():
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            return (f"{os.path.relpath(path, folder)} is missing (its index names it, "
                    f"{needed:,} bytes of tensors)")
        if size < needed:
            return (f"{os.path.relpath(path, folder)} is cut short ({size:,} bytes; its "
                    f"index expects {needed:,})")
    return None


def check_bundle(prefix, what="checkpoint", name=None):
    """ValueError in one line, `NAME: unreadable WHAT: FILE is ...` (NAME: `name`, else
    `prefix`; FILE relative to NAME's folder), when `bundle_damage` finds the checkpoint
    `prefix` damaged. Every reader calls it before TensorFlow reads the checkpoint."""
    name = name or prefix
    damage = bundle_damage(prefix, name if os.path.isdir(name) else os.path.dirname(name))
    if damage:
        raise ValueError(f"{name}: unreadable {what}: {damage}")


def read_failure(error):
    """What an error TensorFlow raised reading a checkpoint's tensors means, in a few
    words: "cut short" (a .data file shorter than its index says: IndexError),
    "checksum mismatch" (a changed byte), else the error's first line."""
    if isinstance(error, IndexError):
        return "cut short"
    text = str(error)
    if "Checksum does not match" in text or "checksum mismatch" in text.lower():
        return "checksum mismatch"
    return tf_error_text((text.strip().splitlines() or [type(error).__name__])[0])


def restore_or_refuse(restore, name, what, hint="a damaged .data file?"):
    """`restore()` (a TensorFlow checkpoint read); ValueError `NAME: unreadable WHAT
    (reason; HINT)` in one line when TensorFlow cannot read it. The failed restore's
    bookkeeping, freed here, would log "unrestored values" warnings after the command's
    one error line: TensorFlow's Python logger keeps to errors meanwhile."""
    import gc
    import logging

    import tensorflow as tf
    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        try:
            return restore()
        except (tf.errors.OpError, IndexError) as e:
            reason = read_failure(e)
        gc.collect()
    finally:
        logger.setLevel(level)
    raise ValueError(f"{name}: unreadable {what} ({reason}; {hint})")


def state_prefixes(folder):
    """The prefixes the `checkpoint` state file in `folder` names, the latest first
    (model_checkpoint_path, then all_model_checkpoint_paths), relative ones joined to
    `folder`; [] when there is no state file. ValueError naming the file when it is not
    the text of a state."""
    path = os.path.join(folder, _STATE_FILE)
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return []
    except (UnicodeDecodeError, IsADirectoryError):
        raise ValueError(f"{path}: not a checkpoint state file (expected the text "
                         f"model_checkpoint_path: \"...\")") from None
    names = re.findall(r'^\s*(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*'
                       r'"((?:[^"\\]|\\.)*)"\s*$', text, re.M)
    latest = [v for k, v in names if k == "model_checkpoint_path"]
    ordered = latest[-1:] + [v for k, v in names if k != "model_checkpoint_path"][::-1]
    found = []
    for name in ordered:      # text-format escapes (\" \\ and octal bytes) undone
        name = codecs.escape_decode(name.encode("utf-8"))[0].decode("utf-8",
                                                                    "surrogateescape")
        name = os.path.join(folder, name)
        moved = os.path.join(folder, os.path.basename(name))
        if not os.path.exists(name + ".index") and os.path.exists(moved + ".index"):
            name = moved      # an absolute name written where the folder was before
        if name not in found:
            found.append(name)
    return found


def latest_prefix(folder):
    """The latest checkpoint the `checkpoint` state file in `folder` names (what
    tf.train.latest_checkpoint returns), or None when `folder` has no state file or it
    names none. ValueError naming the missing index (and the state file) when the
    checkpoint it names is gone: tf.train.latest_checkpoint logs two ERROR lines and
    returns None there, so a resumed run would start over and a reader would say "no
    checkpoint"."""
    if "://" in folder:
        import tensorflow as tf
        return tf.train.latest_checkpoint(folder)
    prefixes = state_prefixes(folder)
    if not prefixes:
        return None
    if os.path.exists(prefixes[0] + ".index"):
        return prefixes[0]
    orphan = orphan_data(prefixes[0])
    if orphan is not None:
        raise orphan
    kept = [p for p in prefixes[1:] if os.path.exists(p + ".index")]
    raise ValueError(
        f"{prefixes[0]}.index: missing (the checkpoint {os.path.basename(prefixes[0])} "
        f"that {os.path.join(folder, _STATE_FILE)} names as the latest"
        + (f"; {os.path.basename(kept[0])}, an earlier one it names, is there: restore the "
           f"missing files, or edit the state file to name it)" if kept else
           ": restore its files, or remove the state file to start over)"))


def orphan_data(path):
    """ValueError naming the missing index when `path` (a folder, or a checkpoint prefix)
    holds a checkpoint's .data files without its .index (copied without it), else None:
    what a reader that found no checkpoint there should say instead."""
    pattern = re.compile(r"^(.*)\.data-\d{5}-of-\d{5}$")
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        folder = path
    else:
        folder, base = os.path.split(path)
        names = sorted(n for n in (os.listdir(folder or ".") if os.path.isdir(folder or ".")
                                   else []) if n.startswith(base + ".data-"))
    for name in names:
        match = pattern.match(name)
        if match and not os.path.exists(os.path.join(folder, match.group(1) + ".index")):
            prefix = os.path.join(folder, match.group(1))
            return ValueError(f"{prefix}.index: missing ({name} is there without it; a "
                              f"TensorFlow checkpoint is read through its index: copied "
                              f"without it?)")
    return None


def load_saved_model(path):
    """tf.saved_model.load(path), its variables checked first (check_bundle: a cut or
    missing file is one line naming it, where TensorFlow raises IndexError from deep
    inside the restore); a read TensorFlow still fails (a changed byte fails a
    variable's checksum) is a ValueError naming `path`, in one line."""
    import tensorflow as tf
    variables = os.path.join(path, "variables", "variables")
    if "://" not in path:
        orphan = orphan_data(variables)
        if orphan is not None:
            raise orphan
        if os.path.exists(variables + ".index"):
            check_bundle(variables, "SavedModel", name=path)
    return restore_or_refuse(lambda: tf.saved_model.load(path), path, "SavedModel",
                             "a damaged variables/ folder?")
