"""The judge's answers in OUTPUT/judgements.jsonl, keyed by a hash of the judge and the exact
question asked, so that a rerun resumes; failures are asked again on a rerun."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from groupwise.analysis.error_position.protocol import Judgement, Message
from groupwise.records import read_jsonl


class JudgeCache:
    """Judge outcomes in a JSON-lines file, keyed by a hash of the judge and the question.

    Only usable judgements count as cached: failed items are asked again on the next run. Each
    record is appended and flushed as soon as it is known.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            rows, _ = read_jsonl(self.path)
            for _, record in rows:
                if isinstance(record, dict) and isinstance(record.get("key"), str):
                    self.records[record["key"]] = record
        self._lock = threading.Lock()

    @staticmethod
    def key(judge_name: str, messages: list[Message]) -> str:
        blob = json.dumps([judge_name, messages], ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def get(self, key: str) -> Judgement | None:
        record = self.records.get(key)
        if record and record.get("step") is not None and record.get("type") is not None:
            return Judgement(step=int(record["step"]), type=str(record["type"]))
        return None

    def put(self, key: str, record: dict[str, Any]) -> None:
        record = {"key": key, **record}
        with self._lock:
            self.records[key] = record
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                f.flush()
