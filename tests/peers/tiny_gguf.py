"""Write a tiny llama-architecture GGUF model that llama-cpp-python loads and that answers
every prompt with "Hello tiny world!": the test model of the llama-cpp-python peer.

Usage (with the peer's Python, which has `gguf` and numpy):
    .peers/llama/bin/python tests/peers/tiny_gguf.py OUT.gguf

No download: 2 blocks, 288-wide embeddings, 4 heads, F32 tensors (3.7 MB, under a second).
The tokenizer is byte-level BPE ("gpt2"): the 256 byte tokens (so any text tokenizes, one
token per byte), 4 merges, 3 reply-only tokens that no merge produces (`Hello`, ` tiny`,
` world!`) and 3 control tokens (`<|endoftext|>` bos, `<|im_start|>`, `<|im_end|>` eos),
with a ChatML template. `token_embd` is one-hot and `output` a next-token table (any token
→ `Hello` → ` tiny` → ` world!` → `<|im_end|>`), while the attention and feed-forward
weights are small noise, so the answer is the same at any temperature: "Hello tiny world!",
finish_reason "stop", 3 completion tokens (`max_tokens` 1 and 2 stop early with "length").
"""

from __future__ import annotations

import sys

import gguf
import numpy as np

N_LAYER, N_EMBD, N_HEAD, N_FF = 2, 288, 4, 64
N_CTX_TRAIN = 2048
MERGES = ["Ġ t", "h e", "i n", "Ġt he"]
REPLY = ["Hello", "Ġtiny", "Ġworld!"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character table."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def vocabulary() -> tuple[list[str], list[int]]:
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)] + [m.replace(" ", "") for m in MERGES] + REPLY
    types = [gguf.TokenType.NORMAL] * len(tokens) + [gguf.TokenType.CONTROL] * len(SPECIALS)
    return tokens + SPECIALS, [int(t) for t in types]


def write(path: str) -> None:
    tokens, types = vocabulary()
    tid = {t: i for i, t in enumerate(tokens)}
    n_vocab = len(tokens)
    nxt = dict.fromkeys(range(n_vocab), tid["Hello"])
    nxt[tid["Hello"]], nxt[tid["Ġtiny"]] = tid["Ġtiny"], tid["Ġworld!"]
    nxt[tid["Ġworld!"]] = tid["<|im_end|>"]
    rng = np.random.default_rng(0)

    def noise(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 1e-3).astype(np.float32)

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-random-llama")
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(tid["<|endoftext|>"])
    w.add_eos_token_id(tid["<|im_end|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    w.add_tensor("token_embd.weight", np.eye(n_vocab, N_EMBD, dtype=np.float32))
    for block in range(N_LAYER):
        p = f"blk.{block}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"{p}{name}.weight", noise(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, np.float32))
        w.add_tensor(p + "ffn_gate.weight", noise(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", noise(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", noise(N_EMBD, N_FF))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    out = np.zeros((n_vocab, N_EMBD), np.float32)
    for i, j in nxt.items():
        out[j, i] = 2.0  # the chosen token's logit ≈ 2·√288 ≈ 34, the others' ≈ 0
    w.add_tensor("output.weight", out)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    write(sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf")
