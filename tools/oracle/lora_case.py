"""What the LoRA oracles (gemma4_lora_oracle.py, qwen35_lora_oracle.py) write
for one case, after `loss.backward()` on a peft-wrapped model:

  <out>/adapter_config.json, adapter_model.safetensors   the adapter (PEFT layout, f32)
  <out>/grads.safetensors   d loss / d every lora_A, lora_B (f32, named as the adapter's tensors)
  <out>/logits.f32          the adapted model's logits of sequence 0 ([len, vocab] f32 LE)
  <out>/base_logits.f32     the same with the adapter disabled
  <out>/case.json           the sequences, the loss, the scored-token count, tool versions
"""
import json
import os
import shutil

import peft
import torch
import transformers
from peft import get_peft_model_state_dict
from safetensors.torch import save_file


def save_lora_case(model, out, seqs, loss, count, vocab, logits0, script, extra=None):
    """Writes the case's files into `out` (replaced); returns the gradients by tensor name."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    state = {k: v.detach().float().contiguous() for k, v in get_peft_model_state_dict(model).items()}
    save_file(state, os.path.join(out, "adapter_model.safetensors"), metadata={"format": "pt"})
    model.peft_config["default"].save_pretrained(out)
    grads = {}
    for pname, p in model.named_parameters():
        if "lora_" in pname:
            key = pname.replace(".default", "")
            assert key in state, key
            grads[key] = p.grad.detach().float().contiguous()
    assert set(grads) == set(state)
    save_file(grads, os.path.join(out, "grads.safetensors"))
    logits0.astype("<f4").tofile(os.path.join(out, "logits.f32"))
    with torch.no_grad(), model.disable_adapter():
        base = model(input_ids=torch.tensor([seqs[0]])).logits[0].float().numpy()
    base.astype("<f4").tofile(os.path.join(out, "base_logits.f32"))
    case = {"sequences": seqs, "loss": float(loss), "n_scored": count, "vocab": vocab}
    case.update(extra or {})
    case["versions"] = {"transformers": transformers.__version__, "torch": torch.__version__,
                        "peft": peft.__version__, "script": script}
    with open(os.path.join(out, "case.json"), "w") as f:
        json.dump(case, f, indent=1)
    return grads
