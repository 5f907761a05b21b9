#!/usr/bin/env python3
"""transformers + peft peer of `train_step_bench` (bench/train_step.cpp): LoRA
training steps with the ORPO loss as TRL's ORPOTrainer defines it, on a
random-initialised LlamaForCausalLM in bf16, timed the same way.

  python3 bench/train_peft_peer.py --shape llama3-8b --prompt 2048 --response 4096 [--grad-checkpointing]
  python3 bench/train_peft_peer.py ... --runs 4096:0,4096:1,16384:1     (branch length : checkpointing)
  python3 bench/train_peft_peer.py --device cpu --threads 2 --shape smollm2-135m ...   (f32 on the CPU)

What one step is (TRL ORPOTrainer.concatenated_forward + odds_ratio_loss, no
padding since both branches have the same length):
  - one forward of the batch [prompt+chosen; prompt+rejected] (batch 2),
  - policy_nll_loss = token-mean cross-entropy over the whole chosen sequence
    (prompt and response: TRL's labels are the input ids there),
  - chosen/rejected log-probs = means over response tokens (get_batch_logps
    with average_log_prob=True), log_odds = (lw − lr) − (log1p(−e^lw) − log1p(−e^lr)),
  - loss = policy_nll_loss − λ·mean(logsigmoid(log_odds)), λ = 0.1,
  - backward, clip_grad_norm_(1.0), AdamW over the LoRA parameters.
LoRA: peft r=16, alpha=32, dropout 0, on q,k,v,o,gate,up,down. Peak memory is
torch.cuda.max_memory_allocated() after reset_peak_memory_stats() (the
weights included; on the CPU the process's peak resident memory), the median
of the timed steps is reported.
"""
import argparse
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = {
    "llama3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0),
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0),
}


DEVICE = "cuda"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def peak_gb():
    if DEVICE == "cuda":
        return torch.cuda.max_memory_allocated() / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def build_model(shape, layers):
    from transformers import LlamaConfig, LlamaForCausalLM
    from peft import LoraConfig, get_peft_model

    kw = dict(SHAPES[shape])
    if layers:
        kw["num_hidden_layers"] = layers
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32  # the CPU: f32, as brioche's --dtype f32
    config = LlamaConfig(**kw, max_position_embeddings=131072, torch_dtype=dtype,
                         attn_implementation="sdpa", tie_word_embeddings=False, use_cache=False)
    torch.set_default_dtype(dtype)
    with torch.device(DEVICE):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, lora)
    return model


def orpo_loss(model, chosen_ids, rejected_ids, prompt_len, lam=0.1):
    """TRL ORPOTrainer: concatenated forward, NLL over the chosen sequence, odds ratio on response means."""
    input_ids = torch.cat([chosen_ids, rejected_ids], dim=0)  # [2, T]
    logits = model(input_ids=input_ids).logits  # [2, T, V]
    labels = input_ids.clone()
    # policy_nll_loss (TRL cross_entropy_loss on the chosen half, all non-pad tokens)
    nll = F.cross_entropy(logits[:1, :-1, :].reshape(-1, logits.shape[-1]), labels[:1, 1:].reshape(-1))
    # get_batch_logps(average_log_prob=True) with the prompt masked (label_pad_token_id)
    resp_labels = labels.clone()
    resp_labels[:, :prompt_len] = -100
    shifted_labels = resp_labels[:, 1:]
    mask = shifted_labels != -100
    safe = torch.where(mask, shifted_labels, 0)
    per_token = torch.gather(logits[:, :-1, :].log_softmax(-1), 2, safe.unsqueeze(2)).squeeze(2)
    logps = (per_token * mask).sum(-1) / mask.sum(-1)
    lw, lr = logps[0], logps[1]
    log_odds = (lw - lr) - (torch.log1p(-torch.exp(lw)) - torch.log1p(-torch.exp(lr)))
    ratio = F.logsigmoid(log_odds)
    return nll - lam * ratio.mean()


def run(model, args, branch, checkpointing):
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    else:
        model.gradient_checkpointing_disable()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    g = torch.Generator(device=DEVICE).manual_seed(1)
    vocab = model.config.vocab_size
    prompt = torch.randint(3, vocab, (1, args.prompt), device=DEVICE, generator=g)
    chosen = torch.cat([prompt, torch.randint(3, vocab, (1, branch), device=DEVICE, generator=g)], dim=1)
    rejected = torch.cat([prompt, torch.randint(3, vocab, (1, branch), device=DEVICE, generator=g)], dim=1)
    sync()
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    times, first = [], None
    try:
        for step in range(args.steps + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            opt.zero_grad(set_to_none=True)
            loss = orpo_loss(model, chosen, rejected, args.prompt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sync()
            dt = (time.perf_counter() - t0) * 1e3
            if step == 0:
                first = loss.item()
            else:
                times.append(dt)
            cpu = time.process_time() - c0  # the process's CPU time, all threads (spin-waits included)
            print(f"  step {step}: loss {loss.item():.4f} {dt:.0f} ms, {cpu:.2f} CPU-s", file=sys.stderr, flush=True)
    except torch.cuda.OutOfMemoryError as e:
        print(f"| peer transformers+peft | orpo P {args.prompt}, {branch} per branch | "
              f"checkpointing {'on' if checkpointing else 'off'} | out of memory | "
              f"peak {peak_gb():.2f} GB |", flush=True)
        del opt
        torch.cuda.empty_cache()
        return
    peak = peak_gb()
    print(f"| peer transformers+peft | orpo P {args.prompt}, {branch} per branch | "
          f"checkpointing {'on' if checkpointing else 'off'} | {statistics.median(times):.0f} ms/step | "
          f"peak {peak:.2f} GB | first loss {first:.4f} |", flush=True)
    del opt
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--response", type=int, default=4096)
    ap.add_argument("--grad-checkpointing", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--runs", default="", help="branch:checkpointing,... (overrides --response/--grad-checkpointing)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--threads", type=int, default=0, help="--device cpu: torch threads (0: torch's default)")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers, peft
    where = torch.cuda.get_device_name() if DEVICE == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, {where}",
          file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    model = build_model(args.shape, args.layers)
    sync()
    print(f"model built in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    runs = [(args.response, args.grad_checkpointing)]
    if args.runs:
        runs = [(int(r.split(":")[0]), r.split(":")[1] == "1") for r in args.runs.split(",")]
    for branch, ckpt in runs:
        run(model, args, branch, ckpt)


if __name__ == "__main__":
    main()
