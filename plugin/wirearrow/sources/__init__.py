"""The input side: how records arrive, and reading them.

* :mod:`~wirearrow.sources.format` -- :class:`RecordFormat`, the one value every way in
  builds (YAML ``input:``, the CLI flags, the engines' keywords, the playground);
* :mod:`~wirearrow.sources.framing` -- length-delimited streams (varint, u32le/be, TFRecord):
  split, read a file a block at a time, plan parallel pieces, frame records for writing;
* :mod:`~wirearrow.sources.files` -- files on any filesystem pyarrow reaches: listing paths,
  directories and globs, record-aligned pieces for parallel readers;
* :mod:`~wirearrow.sources.compression` -- compressed files and buffers;
* :mod:`~wirearrow.sources.confluent` -- the Confluent Schema Registry prefix;
* :mod:`~wirearrow.sources.protojson` -- protojson records (JSON -> wire bytes);
* :mod:`~wirearrow.sources.records` -- any accepted input -> one buffer and record bounds;
* :mod:`~wirearrow.sources.varint` -- the one Python varint.
"""
