"""A tokenizer and a text data set made on the spot, for running torchtitan's trainer without
downloading anything (tests, trying the command line on a laptop).

`make_assets(folder)` writes

    folder/tokenizer/tokenizer.json, tokenizer_config.json   a byte-level BPE trained here
    folder/data/train.jsonl                                 JSON lines with a "text" field

for `--hf_assets_path folder/tokenizer --dataloader.dataset_path folder/data` (torchtitan's
`c4_test` loader reads any local folder of JSON lines with `load_dataset(path, split="train")`).
The text is English-like sentences drawn from a fixed word list with a seeded generator, so the
same seed gives the same files, byte for byte.

    python -m jointfx.torchtitan.toy_data FOLDER [--vocab 512] [--documents 400]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"

_WORDS = (
    "the a one every some graph node pass bucket gather scatter shard parameter gradient "
    "layer block model token step loss forward backward memory device rank group mesh "
    "compiler schedule plan overlap compute reduce tensor value order phase train run keep "
    "moves reads writes saves frees splits joins waits sends finds checks builds returns "
    "small large early late first last fast slow quiet busy new old each other many few "
    "and or but then while because after before when where so yet"
).split()


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 14))]
    return " ".join(words).capitalize() + rng.choice([".", ".", ".", "?", "!"])


def _documents(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(_sentence(rng) for _ in range(rng.randint(3, 12))) for _ in range(n)]


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def make_assets(folder: str | os.PathLike[str], *, vocab: int = 512, documents: int = 400,
                seed: int = 0) -> dict[str, Path]:
    """Writes the tokenizer and the data set under `folder`; returns their folders
    ({"tokenizer": ..., "data": ...}). `vocab` must not exceed the model's vocabulary (the
    llama3 debugmodel has 2048)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = Path(folder)
    docs = _documents(documents, seed)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    tok_dir = root / "tokenizer"
    _write_atomic(tok_dir / "tokenizer.json", tok.to_str())
    _write_atomic(tok_dir / "tokenizer_config.json",
                  json.dumps({"bos_token": BOS, "eos_token": EOS, "add_bos_token": False,
                              "add_eos_token": False}, indent=1) + "\n")
    data_dir = root / "data"
    _write_atomic(data_dir / "train.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in docs))
    return {"tokenizer": tok_dir, "data": data_dir}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--documents", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    paths = make_assets(a.folder, vocab=a.vocab, documents=a.documents, seed=a.seed)
    print(f"--hf_assets_path {paths['tokenizer']} --dataloader.dataset_path {paths['data']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
