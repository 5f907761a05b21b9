#!/usr/bin/env python3
"""Gemma 4 GGUF fixtures written by llama.cpp's own converter.

llama.cpp's convert_hf_to_gguf.py (Gemma4Model; from the llama-cpp-python
sdist, which vendors llama.cpp: `pip download --no-deps --no-binary :all:
llama-cpp-python==0.3.36`, unpack, pass vendor/llama.cpp) converts the
random-weight transformers fixtures tests/fixtures/gemma4/{mix,e2b} to f32
GGUF:

  tests/fixtures/gemma4/gguf/{mix,e2b,moe}.f32.gguf

mix: sliding + full layers with their own head dims and kv heads,
proportional partial RoPE (rope_freqs), attention_k_eq_v, untied head,
soft-capping; e2b: per-layer inputs, KV-shared layers with the double-wide
MLP, tied embeddings (bf16 weights, exact in f32); moe: the MoE block
beside the dense MLP, from a Gemma4ForConditionalGeneration (bf16). f32 is lossless, so the
fixtures' goldens (tests/fixtures/gemma4/goldens, transformers' logits on
token ids, tools/oracle/gemma4_oracle.py) are the oracle for these files.

The converter reads Gemma's tokenizer kind only (SentencePiece-style BPE
with byte fallback, LlamaHfVocab); the fixtures' byte-level BPE is not one,
so each is converted from a copy whose tokenizer.json is a byte-fallback
BPE of the same size trained here (the GGUF's tokenizer is that one; the
tests compare logits on token ids). One converter limit is worked
around: transformers 5.25 drops global_head_dim when it equals head_dim
(per_layer_config is then {}), which the converter needs; the moe
fixture's full layers have head_dim 16 like the sliding ones, so the
converter is handed global_head_dim = head_dim.

Usage: python3 tools/oracle/gemma4_gguf_fixtures.py <llama.cpp source dir>
"""
import os
import runpy
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB = 320
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]


def byte_fallback_tokenizer(path):
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    text = "The quick brown fox jumps over the lazy dog. Hello world, how are you today? " * 20
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS + [f"<0x{b:02X}>" for b in range(256)],
                                  initial_alphabet=list("abcdefghijklmnopqrstuvwxyz\u2581"), show_progress=False)
    tok.train_from_iterator([text.replace(" ", "\u2581")], trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    tok.save(path)


def main():
    llama = os.path.abspath(sys.argv[1])
    sys.path[:0] = [llama, os.path.join(llama, "gguf-py")]
    import conversion.gemma as gemma
    init = gemma.Gemma4Model.__init__

    def init_with_global_head_dim(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if self.hparams.get("global_head_dim") is None and not self.hparams.get("per_layer_config"):
            self.hparams["global_head_dim"] = self.hparams["head_dim"]

    gemma.Gemma4Model.__init__ = init_with_global_head_dim
    out = os.path.join(ROOT, "tests", "fixtures", "gemma4", "gguf")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("mix", "e2b", "moe"):
            src = os.path.join(tmp, name)
            shutil.copytree(os.path.join(ROOT, "tests", "fixtures", "gemma4", name), src)
            byte_fallback_tokenizer(os.path.join(src, "tokenizer.json"))
            shutil.copy(os.path.join(src, "tokenizer.json"), os.path.join(out, "tokenizer.json"))
            sys.argv = [os.path.join(llama, "convert_hf_to_gguf.py"), src, "--outtype", "f32",
                        "--outfile", os.path.join(out, f"{name}.f32.gguf")]
            try:
                runpy.run_path(sys.argv[0], run_name="__main__")
            except SystemExit as e:
                if e.code:
                    raise
    tokenizer_goldens(os.path.join(out, "tokenizer.json"), os.path.join(out, "tokenizer_goldens.json"))


TEXTS = ["The quick brown fox", "Hello world, how are you today?", "  two  spaces and\nnewlines\n\n",
         "caf\u00e9 \u00fcber na\u00efve \U0001f35e", "jumps over the lazy dog.", "x"]


def tokenizer_goldens(path, out):
    """The ids `tokenizers` gives the tokenizer.json the GGUFs were made
    from (no special tokens added): brioche's reading of the GGUF's
    tokenizer (model gemma4) must give the same."""
    import json
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(path)
    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]
    with open(out, "w") as f:
        json.dump({"cases": cases, "produced_by": {"tokenizers": tokenizers.__version__,
                                                   "script": "tools/oracle/gemma4_gguf_fixtures.py"}}, f, indent=1)


if __name__ == "__main__":
    main()
