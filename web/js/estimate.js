// Memory and time of a job before it starts, from what the server has
// measured and reported (docs/web.md, "Estimates"):
//
//   tokens per step = batch × min(max_length, the file's mean row length)
//                     × (2 for a preference method: chosen and rejected)
//   time            = steps × tokens per step / tokens_per_s
//   memory          = a finished or running job's estimated_memory_bytes
//                     (the server's upper bound, docs/jobs-api.md) and its
//                     measured peak_memory_bytes
//
// The reference job is the most recent one on this server with the same
// base model, the same kind of method (SFT or preference) and the same
// memory levers, preferring the same batch × max_length; its tokens_per_s is
// the median of its step rows. With no such job there is no number yet:
// the server computes its estimate when the job is created (the job shows
// it, and a job over the server's budget is refused with over_memory_budget).
import {jobMetrics, methodOf} from './jobs_client.js';

const measured = new Map();  // job id -> {tokensPerSecond, peakBytes} (finished jobs only)

function median(values) {
  if (values.length === 0) return null;
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function measure(job) {
  if (measured.has(job.id)) return measured.get(job.id);
  const metrics = await jobMetrics(job.id);
  const steps = (metrics.data || []).filter(r => r.kind === 'step');
  const result = {
    tokensPerSecond: median(steps.map(r => r.tokens_per_s).filter(v => typeof v === 'number' && v > 0)),
    peakBytes: Math.max(0, ...(metrics.data || []).map(r => r.peak_memory_bytes).filter(v => typeof v === 'number')) || null,
  };
  if (['succeeded', 'failed', 'cancelled'].includes(job.status)) measured.set(job.id, result);
  return result;
}

function hyperparameters(job) {
  const type = methodOf(job);
  return (job.method && job.method[type] && job.method[type].hyperparameters) || {};
}

export const LEVER_KEYS = ['segment_size', 'grad_checkpoint', 'head_chunk_size', 'mlp_chunk_size', 'prefix_shared',
  'offload_boundaries', 'offload_attention', 'device'];

// The levers a job was given, as a comparable string.
export function leverSignature(hp) {
  return JSON.stringify(LEVER_KEYS.map(k => (hp[k] === undefined ? null : hp[k])));
}

// plan: {model, preference, levers, batch, maxLength, steps, meanLength}; jobs: the server's, newest first.
export async function estimate(plan, jobs) {
  const tokensPerStep = plan.batch * Math.min(plan.maxLength, plan.meanLength || plan.maxLength) * (plan.preference ? 2 : 1);
  const candidates = jobs.filter(j => j.model === plan.model && (methodOf(j) !== 'supervised') === plan.preference &&
    leverSignature(hyperparameters(j)) === leverSignature(plan.levers) && j.step > 0);
  const same = candidates.find(j => {
    const hp = hyperparameters(j);
    return hp.batch_size === plan.batch && hp.max_length === plan.maxLength;
  });
  const reference = same || candidates[0] || null;
  const result = {tokensPerStep, reference, seconds: null, estimatedBytes: null, peakBytes: null, exact: Boolean(same)};
  if (!reference) return result;
  const m = await measure(reference);
  if (m.tokensPerSecond) result.seconds = plan.steps * tokensPerStep / m.tokensPerSecond;
  if (same) {
    result.estimatedBytes = reference.estimated_memory_bytes || null;
    result.peakBytes = m.peakBytes;
  }
  return result;
}
