#!/usr/bin/env python3
"""First-step metrics and LoRA gradients of TRL's own trainers, for tests/train/trl_parity_test.cpp.

The model is the tiny random Llama of tests/train/golden/tiny_llama (vocab 64,
2 layers, f32 safetensors, written by train_goldens.py). A PEFT LoRA adapter
(rank 4, alpha 8, all seven projections) is initialised as PEFT does by
default (A Kaiming-uniform, B = 0, torch seed 7) and saved with
`save_pretrained` to tests/train/golden/trl/adapter_init: brioche warm-starts
from the same files, so at step 0 policy == reference on both sides.

Four preference pairs (token ids, no tokenizer involved: the trainers'
tokenize step is bypassed and given the ids) go through one optimizer step of

  dpo   : trl.DPOTrainer, loss_type sigmoid, beta 0.1
  ipo   : trl.DPOTrainer, loss_type ipo, beta 0.1
  dpo_rpo : trl.DPOTrainer, loss_type ["sigmoid", "sft"], loss_weights [1, 0.5], beta 0.1: DPO with
          rpo_alpha 0.5 (TRL 1.16 dropped the rpo_alpha field; the "sft" loss type with its weight is what
          replaced it: NLL = −mean of the chosen completion tokens' log-probs over the whole batch)
  ipo_rpo : the same with loss_type ["ipo", "sft"], loss_weights [1, 2.0]
  orpo  : trl.experimental.orpo.ORPOTrainer, beta (= brioche's orpo_lambda) 0.25
  simpo : trl.experimental.cpo.CPOTrainer, loss_type simpo, beta 2.0, simpo_gamma 0.5, cpo_alpha 0

with all four pairs in one batch, no gradient clipping, in f32 (TRL's configs
default to bf16 autocast, which moves the log-probs by ~2e-4 relative: off). Recorded per method:
the loss the trainer's compute_loss returned, every metric it logged
(rewards/*, logps/*, nll_loss, log_odds_ratio, log_odds_chosen, ...), and the
LoRA gradients at the optimizer step (a callback's on_pre_optimizer_step),
written to tests/train/golden/trl/trl_goldens.json and trl_grads.safetensors.

  python3 tools/oracle/trl_goldens.py      # regenerate (CPU, a few seconds)
"""
import json
import os
import shutil
import tempfile
import warnings

import torch
import transformers
import peft
import trl
from datasets import Dataset
from safetensors.torch import save_file
from tokenizers import Tokenizer, models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.path.join(ROOT, "tests", "train", "golden", "tiny_llama")
OUT = os.path.join(ROOT, "tests", "train", "golden", "trl")
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK, ALPHA = 4, 8.0
PAD, BOS, EOS = 0, 1, 2

# (prompt, chosen, rejected) token ids; every response ends with EOS, as TRL appends it.
PAIRS = [
    ([1, 5, 9, 13, 3], [21, 34, 2], [22, 35, 36, 2]),
    ([1, 7, 8], [40, 41, 2], [50, 2]),
    ([1, 11, 12, 14, 15, 16], [43, 44, 45, 46, 2], [51, 52, 2]),
    ([1, 30, 31], [47, 2], [53, 54, 55, 56, 57, 2]),
]

METHODS = {
    "dpo": {"trainer": "dpo", "loss_type": "sigmoid", "beta": 0.1},
    "ipo": {"trainer": "dpo", "loss_type": "ipo", "beta": 0.1},
    "dpo_rpo": {"trainer": "dpo", "loss_type": "sigmoid", "beta": 0.1, "rpo_alpha": 0.5},
    "ipo_rpo": {"trainer": "dpo", "loss_type": "ipo", "beta": 0.1, "rpo_alpha": 2.0},
    "orpo": {"trainer": "orpo", "beta": 0.25},
    "simpo": {"trainer": "cpo", "loss_type": "simpo", "beta": 2.0, "simpo_gamma": 0.5},
}


def tokenizer():
    """A word-level tokenizer over ids 0..63: the trainers need one for pad/bos/eos ids only."""
    vocab = {f"t{i}": i for i in range(64)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t3"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", bos_token="t1",
                                                eos_token="t2", unk_token="t3")
    return fast


def peft_model():
    model = transformers.LlamaForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32)
    torch.manual_seed(7)
    cfg = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=MODULES, lora_dropout=0.0, bias="none",
                          task_type="CAUSAL_LM")
    return peft.get_peft_model(model, cfg)


def orpo_cpo_row(feature):
    """What ORPOTrainer/CPOTrainer.tokenize_row returns, from ids (labels −100 on the prompt)."""
    p, c, r = feature["prompt_ids"], feature["chosen_ids"], feature["rejected_ids"]
    out = {"prompt_input_ids": p, "prompt_attention_mask": [1] * len(p)}
    for name, ans in (("chosen", c), ("rejected", r)):
        out[f"{name}_input_ids"] = p + ans
        out[f"{name}_attention_mask"] = [1] * (len(p) + len(ans))
        out[f"{name}_labels"] = [-100] * len(p) + ans
    return out


class Capture(transformers.TrainerCallback):
    def __init__(self):
        self.logs, self.grads = {}, {}

    def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
        for name, p in model.named_parameters():
            if "lora_" in name and p.grad is not None:
                parts = name.split(".")
                ab = "lora_A" if "lora_A" in name else "lora_B"
                layer = parts[parts.index("layers") + 1]
                module = parts[parts.index(ab) - 1]
                self.grads[f"layers.{layer}.{module}.{ab}"] = p.grad.detach().float().clone()

    def on_log(self, args, state, control, logs=None, **kw):
        if logs:
            self.logs.update(logs)


def chosen_nll():
    """−mean log p of every chosen completion token of the batch under the initial adapter (B = 0)."""
    model = peft_model().eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for p, c, _ in PAIRS:
            ids = torch.tensor([p + c])
            logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
            for k, tok in enumerate(c):
                total += float(logp[len(p) + k - 1, tok])
                n += 1
    return -total / n


def run(method, spec, workdir):
    model = peft_model()
    tok = tokenizer()
    rows = [{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r} for p, c, r in PAIRS]
    common = dict(output_dir=os.path.join(workdir, method), per_device_train_batch_size=len(PAIRS), max_steps=1,
                  learning_rate=1e-6, max_grad_norm=0.0, logging_steps=1, bf16=False, fp16=False, report_to="none", use_cpu=True,
                  save_strategy="no", lr_scheduler_type="constant", seed=0, remove_unused_columns=False)
    capture = Capture()
    losses = []
    if spec["trainer"] == "dpo":
        class Dpo(trl.DPOTrainer):
            def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
                return dataset  # already prompt_ids / chosen_ids / rejected_ids

            def compute_loss(self, *a, **k):
                loss = super().compute_loss(*a, **k)
                losses.append(float(loss.detach()))
                return loss

        extra = {}
        if "rpo_alpha" in spec:
            extra = dict(loss_type=[spec["loss_type"], "sft"], loss_weights=[1.0, spec["rpo_alpha"]])
        args = trl.DPOConfig(beta=spec["beta"], **(extra or dict(loss_type=[spec["loss_type"]])), max_length=None,
                             **common)
        trainer = Dpo(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                      callbacks=[capture])
    else:
        if spec["trainer"] == "orpo":
            from trl.experimental.orpo import ORPOConfig as Config, ORPOTrainer as Base
            extra = dict(beta=spec["beta"])
        else:
            from trl.experimental.cpo import CPOConfig as Config, CPOTrainer as Base
            extra = dict(beta=spec["beta"], loss_type=spec["loss_type"], simpo_gamma=spec["simpo_gamma"],
                         cpo_alpha=0.0)

        class Pref(Base):
            def tokenize_row(self, feature, model=None):
                return orpo_cpo_row(feature)

            def compute_loss(self, *a, **k):
                loss = super().compute_loss(*a, **k)
                losses.append(float((loss[0] if isinstance(loss, tuple) else loss).detach()))
                return loss

        args = Config(max_length=256, **extra, **common)
        # The prompt/chosen/rejected text columns the trainers' map steps look for: ids as strings.
        text_rows = [dict(r, prompt=" ".join(f"t{i}" for i in r["prompt_ids"]),
                          chosen=" ".join(f"t{i}" for i in r["chosen_ids"]),
                          rejected=" ".join(f"t{i}" for i in r["rejected_ids"])) for r in rows]
        trainer = Pref(model=model, args=args, train_dataset=Dataset.from_list(text_rows), processing_class=tok,
                       callbacks=[capture])
    trainer.train()
    metrics = {k: v for k, v in capture.logs.items()
               if k.startswith(("rewards/", "logps/", "nll_loss", "log_odds")) and isinstance(v, float)}
    assert len(losses) == 1, losses
    if "rpo_alpha" in spec:
        # TRL 1.16 logs no NLL for DPO (older TRL logged rpo_alpha's as nll_loss, unweighted): computed here
        # from the model at the step's start, then checked against TRL's loss (DPO part + α · NLL).
        metrics["nll_loss"] = chosen_nll()
        # At step 0 policy == reference: every reward is 0, DPO's part is log 2 and IPO's (1/(2β))².
        assert metrics["rewards/margins"] == 0.0, metrics
        first = 0.6931471805599453 if spec["loss_type"] == "sigmoid" else (1 / (2 * spec["beta"])) ** 2
        assert abs(losses[0] - (first + spec["rpo_alpha"] * metrics["nll_loss"])) < 1e-5 * losses[0], losses
    return {"loss": losses[0], "metrics": metrics}, capture.grads


def main():
    warnings.filterwarnings("ignore")
    os.makedirs(OUT, exist_ok=True)
    init_dir = os.path.join(OUT, "adapter_init")
    if os.path.exists(init_dir):
        shutil.rmtree(init_dir)
    peft_model().save_pretrained(init_dir)
    # A path relative to the repository, not this machine's.
    cfg_path = os.path.join(init_dir, "adapter_config.json")
    cfg = json.load(open(cfg_path))
    cfg["base_model_name_or_path"] = "tests/train/golden/tiny_llama"
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    goldens = {"tool": {"trl": trl.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                        "torch": torch.__version__, "script": "tools/oracle/trl_goldens.py", "dtype": "float32"},
               "rank": RANK, "alpha": ALPHA, "pairs": PAIRS, "methods": {}}
    grads = {}
    with tempfile.TemporaryDirectory() as work:
        for method, spec in METHODS.items():
            result, g = run(method, spec, work)
            result["config"] = {k: v for k, v in spec.items() if k != "trainer"}
            goldens["methods"][method] = result
            for k, v in g.items():
                grads[f"{method}.{k}"] = v.contiguous()
            print(method, json.dumps(result))
    with open(os.path.join(OUT, "trl_goldens.json"), "w") as f:
        json.dump(goldens, f, indent=1)
        f.write("\n")
    save_file(grads, os.path.join(OUT, "trl_grads.safetensors"), metadata={"tool": "trl " + trl.__version__})


if __name__ == "__main__":
    main()
