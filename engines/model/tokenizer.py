"""Tokenizers behind one small interface: the built-in character tokenizer and HF tokenizers."""
from __future__ import annotations

import string

# Special ids first so they never collide with characters.
PAD, BOS, EOS = 0, 1, 2
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))


class CharTokenizer:
    """One token per printable ASCII character (+ newline); unknown characters map to '?'."""

    pad_token_id, bos_token_id, eos_token_id = PAD, BOS, EOS

    def __init__(self):
        self._to_id = {ch: i + 3 for i, ch in enumerate(CHARS)}
        self._unk = self._to_id["?"]

    @property
    def vocab_size(self) -> int:
        return len(CHARS) + 3

    def encode(self, text: str) -> list[int]:
        return [self._to_id.get(ch, self._unk) for ch in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(CHARS[i - 3] for i in ids if i >= 3)

    def prompt_ids(self, prompt_text: str) -> list[int]:
        return [BOS] + self.encode(prompt_text)


class HFTokenizer:
    """Adapter over a transformers tokenizer; prompts go through the chat template when there is
    one."""

    def __init__(self, tok, use_chat_template: bool | None = None):
        self.tok = tok
        self.eos_token_id = tok.eos_token_id
        self.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        has_template = bool(getattr(tok, "chat_template", None))
        self.use_chat_template = has_template if use_chat_template is None else use_chat_template

    @property
    def vocab_size(self) -> int:
        return len(self.tok)

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def prompt_ids(self, prompt_text: str) -> list[int]:
        if self.use_chat_template:
            msgs = [{"role": "user", "content": prompt_text}]
            out = self.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if isinstance(out, dict) or hasattr(out, "keys"):
                out = out["input_ids"]
            return list(out)
        return list(self.tok.encode(prompt_text, add_special_tokens=True))


assert set(string.printable) - set(CHARS) <= set("\t\r\x0b\x0c")
