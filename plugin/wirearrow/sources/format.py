"""RecordFormat: how records arrive, as one frozen, picklable value.

Every way in builds this one value from its fields, under the same names: a YAML plan's
``input:`` section, the command line's input flags, ``Transcoder.transcode(records,
framing=...)`` / ``decode``, ``wirearrow.ray.Transcode`` / ``transcode`` and
``read_delimited``, ``wirearrow.beam.ToArrow`` and ``ReadFromDelimited``, and the
playground. Each field is checked here (a ValueError or TypeError naming it), combinations
included, so no reader checks them again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wirearrow.sources.compression import INPUT_COMPRESSIONS, compression_name
from wirearrow.sources.framing import FRAMINGS
from wirearrow.sources.registry import registry_source

__all__ = ["BINARY", "CONFLUENT", "FORMATS", "RECORD_FRAMINGS", "RecordFormat"]

# What each record is: protobuf's binary wire format, or protojson text.
FORMATS = ("binary", "json")
# A per-record prefix rather than a stream framing: the Confluent Schema Registry's.
CONFLUENT = "confluent"
RECORD_FRAMINGS = (*FRAMINGS, CONFLUENT)


def _field(default: Any, doc: str, **meta: Any) -> Any:
    return dataclasses.field(default=default, metadata={"doc": doc, **meta})


@dataclass(frozen=True)
class RecordFormat:
    """How records arrive: their format, framing, compression, Confluent schema ids, and
    the column of a table that holds them. Every field is optional (the defaults read
    binary records as they are). Derive variants with :meth:`replace`."""

    format: str = _field(
        "binary",
        "`binary`: protobuf wire records; `json`: protojson text (NDJSON files), read as "
        "json_format.Parse reads it",
        choices=FORMATS,
    )
    framing: str | None = _field(
        None,
        "how records are delimited in one buffer, stream or file: `varint` (protobuf's "
        "writeDelimitedTo), `u32le` / `u32be` (4-byte lengths), `tfrecord` (CRCs checked); "
        "or `confluent`: each record carries the Confluent Schema Registry prefix (magic 0, "
        "schema id, message indexes). None: records given one by one (an array, a list); "
        "files: varint",
        choices=RECORD_FRAMINGS,
    )
    delimited_by: str | None = _field(
        None,
        "framing `confluent` in a buffer, stream or file: the framing that delimits its "
        "records (default varint)",
        choices=FRAMINGS,
    )
    compression: str = _field(
        "auto",
        "the codec of a file, stream or buffer of records: `auto` (a file: by its suffix, "
        ".gz .bz2 .zst .xz .deflate; a buffer: none) or a codec name",
        choices=INPUT_COMPRESSIONS,
    )
    schemas: Mapping[int, Any] | Callable[[int], Any] | str | None = _field(  # noqa: RUF009 (a Field)
        None,
        "framing `confluent`: the schema ids accepted: a {schema_id: Schema} mapping, a "
        "function schema_id -> Schema | None, a wirearrow.sources.confluent.SchemaIds, or a "
        "Confluent-compatible schema registry: its URL or a confluent-kafka "
        "SchemaRegistryClient (docs/evolution.md)",
    )
    schema_id: bool | str = _field(
        False,
        "framing `confluent`: true (or a column name) adds an int64 column `_schema_id` "
        "(that name) with each row's schema id",
    )
    ignore_unknown_fields: bool = _field(
        False,
        "format `json`: skip unknown fields and enum names, as json_format.Parse's option",
    )
    column: str | None = _field(
        None,
        "the column of a table (Arrow, Polars, a Ray batch, a Beam row) that holds the "
        "records; None: the table's only column, else `value`",
    )

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {self.format!r}")
        if self.framing is not None and self.framing not in RECORD_FRAMINGS:
            raise ValueError(
                f"framing must be one of {', '.join(RECORD_FRAMINGS)}, not {self.framing!r}"
            )
        if self.delimited_by is not None and self.delimited_by not in FRAMINGS:
            raise ValueError(
                f"delimited_by must be one of {', '.join(FRAMINGS)}, not {self.delimited_by!r}"
            )
        object.__setattr__(self, "compression", compression_name(self.compression))
        registry = registry_source(self.schemas)
        if registry is not None:  # a URL or a client: the look-up that fetches from it
            object.__setattr__(self, "schemas", registry)
        if not isinstance(self.schema_id, bool | str) or self.schema_id == "":
            raise TypeError(f"schema_id must be True, False or a column name, not {self.schema_id!r}")
        if self.column is not None and (not isinstance(self.column, str) or not self.column):
            raise TypeError(f"column must be a column name, not {self.column!r}")
        if not isinstance(self.ignore_unknown_fields, bool):
            raise TypeError(
                f"ignore_unknown_fields must be True or False, not {self.ignore_unknown_fields!r}"
            )
        confluent = self.framing == CONFLUENT
        if confluent and self.schemas is None:
            raise ValueError(
                "framing='confluent' needs schemas= (the schema of each Confluent schema id)"
            )
        for name, given in (
            ("schemas", self.schemas is not None),
            ("schema_id", self.schema_id is not False),
            ("delimited_by", self.delimited_by is not None),
        ):
            if given and not confluent:
                raise ValueError(f"{name}= is for framing='confluent'")
        if self.format == "json":
            if confluent:
                raise ValueError("framing='confluent' is for binary records, not format='json'")
            if self.framing is not None:
                raise ValueError(
                    f"format='json' records are one per line or item, not framed by {self.framing!r}"
                )
        elif self.ignore_unknown_fields:
            raise ValueError("ignore_unknown_fields= is for format='json'")

    def replace(self, **changes: Any) -> RecordFormat:
        """This format with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, input: RecordFormat | None = None, **changes: Any) -> RecordFormat:
        """``input`` (default: binary records as they are) with ``changes`` applied: how the
        readers and ``transcode`` take a format and keyword overrides together."""
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            raise TypeError(f"unknown input options: {', '.join(unknown)}")
        if input is None:
            # The default format is built once: decode() asks for it on every call.
            return cls(**changes) if changes else BINARY
        if not isinstance(input, RecordFormat):
            raise TypeError(f"input must be a wirearrow.RecordFormat, not {type(input).__name__}")
        return input.replace(**changes) if changes else input

    @classmethod
    def one_by_one(
        cls, plan_input: RecordFormat, input: RecordFormat | None = None, **changes: Any
    ) -> RecordFormat:
        """How records that come one by one arrive (a table's column, one per row; a Beam
        PCollection, one per element): ``input``, by default ``plan_input`` (a plan's
        ``input:``) without the framing and compression of a stream of them (a reader's),
        with ``changes`` over it. A framing that splits a buffer is a ValueError."""
        if input is None:
            framing = CONFLUENT if plan_input.confluent else None
            input = plan_input.replace(framing=framing, delimited_by=None, compression="auto")
        fmt = cls.of(input, **changes)
        if fmt.buffer_framing is not None:
            raise ValueError(
                "records one by one (one record per row of a column, one per element) are "
                f"framed by None or 'confluent' without delimited_by, not {fmt.buffer_framing!r}: "
                "files of framed records are read by read_delimited / ReadFromDelimited"
            )
        return fmt

    @property
    def confluent(self) -> bool:
        """Each record carries a Confluent prefix."""
        return self.framing == CONFLUENT

    @property
    def stream_framing(self) -> str:
        """The framing that delimits the records of a buffer, stream or file."""
        if self.framing is None:
            return "varint"
        if self.framing == CONFLUENT:
            return self.delimited_by or "varint"
        return self.framing

    @property
    def buffer_framing(self) -> str | None:
        """The framing of one buffer of records given to ``transcode``: None when the
        records come one by one (with or without a Confluent prefix each)."""
        if self.framing == CONFLUENT:
            return self.delimited_by
        return self.framing


# name -> field, in declaration order: the keywords every reader and transcode take.
FIELDS: Mapping[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(RecordFormat)}


BINARY = RecordFormat()  # binary records as they are: RecordFormat.of()'s default
