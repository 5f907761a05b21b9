"""The reference side of the e2e tests that compare `brioche serve` with a
transformers (or peft) model: its greedy continuation of a prompt, each
token with its log-probability, as /v1/completions reports them with
`"logprobs": 1` (log_softmax of the last position's logits; the token's
text decoded alone, special tokens kept)."""


def greedy_decode(model, tokenizer_json, prompt_ids, n_tokens):
    """(tokens, logprobs): `model`'s n_tokens greedy tokens after prompt_ids,
    recomputing the whole sequence each step (no cache: the reference is
    the plain forward)."""
    import torch
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_json)
    ids, tokens, logprobs = list(prompt_ids), [], []
    with torch.no_grad():
        for _ in range(n_tokens):
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1], dim=-1)
            t = int(logp.argmax())
            tokens.append(tok.decode([t], skip_special_tokens=False))
            logprobs.append(float(logp[t]))
            ids.append(t)
    return tokens, logprobs
