// Memory and time of a job before it starts, from what the server has
// measured and reported (docs/web.md, "Estimates"):
//
//   tokens per step = batch × min(max_length, the file's mean row length)
//                     × (2 for a preference method: chosen and rejected)
//   time            = steps × tokens per step / tokens_per_s
//   memory          = the server's bound (estimated_memory_bytes,
//                     docs/jobs-api.md) of an earlier job of the same shape,
//                     with its measured peak_memory_bytes; or, from earlier
//                     jobs of two or more other shapes, that bound's line
//                     through them: with the levers and the rank fixed, the
//                     server's formula is a constant plus a cost per token of
//                     a step (batch × max_length × branches), so two shapes
//                     determine it
//
// The reference jobs are those on this server with the same base model, the
// same kind of method (SFT or preference) and the same memory levers (for
// memory also the same rank); the newest one of the same batch × max_length
// first; its tokens_per_s is the median of its step rows. With none there is
// no number yet: the server computes its bound when the job is created (the
// job shows it, and a job over the server's budget is refused with
// over_memory_budget).
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

// plan: {model, preference, levers, rank (undefined: the default), batch, maxLength, steps, meanLength};
// jobs: the server's, newest first.
export async function estimate(plan, jobs) {
  const tokensPerStep = plan.batch * Math.min(plan.maxLength, plan.meanLength || plan.maxLength) * (plan.preference ? 2 : 1);
  const candidates = jobs.filter(j => j.model === plan.model && (methodOf(j) !== 'supervised') === plan.preference &&
    leverSignature(hyperparameters(j)) === leverSignature(plan.levers) && j.step > 0);
  const sameRank = candidates.filter(j => hyperparameters(j).rank === plan.rank && j.estimated_memory_bytes > 0);
  const same = sameRank.find(j => {
    const hp = hyperparameters(j);
    return hp.batch_size === plan.batch && hp.max_length === plan.maxLength;
  });
  const reference = same || candidates[0] || null;
  const result = {tokensPerStep, reference, seconds: null, estimatedBytes: null, peakBytes: null, exact: Boolean(same), fittedFrom: null};
  if (!reference) return result;
  const m = await measure(reference);
  if (m.tokensPerSecond) result.seconds = plan.steps * tokensPerStep / m.tokensPerSecond;
  if (same) {
    result.estimatedBytes = same.estimated_memory_bytes;
    result.peakBytes = m.peakBytes;
  } else {
    const fit = fitBound(sameRank, plan);
    if (fit) Object.assign(result, fit);
  }
  return result;
}

// The tokens of a step as the server's bound counts them (max_length, not the rows' lengths).
function boundTokens(batch, maxLength, preference) {
  return batch * maxLength * (preference ? 2 : 1);
}

// The line bound = a + b × tokens through the jobs' bounds (least squares;
// exact when the jobs share levers and rank), at the plan's tokens. Needs
// two different token counts.
function fitBound(jobs, plan) {
  const points = new Map();  // tokens -> {bytes, job}
  for (const j of jobs) {
    const hp = hyperparameters(j);
    if (!hp.batch_size || !hp.max_length) continue;
    const x = boundTokens(hp.batch_size, hp.max_length, plan.preference);
    if (!points.has(x)) points.set(x, {bytes: j.estimated_memory_bytes, job: j});
  }
  if (points.size < 2) return null;
  const xs = [...points.keys()];
  const ys = xs.map(x => points.get(x).bytes);
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0, sxx = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i] - mx) * (ys[i] - my);
    sxx += (xs[i] - mx) ** 2;
  }
  const slope = sxy / sxx;
  const bytes = my + slope * (boundTokens(plan.batch, plan.maxLength, plan.preference) - mx);
  return bytes > 0 ? {estimatedBytes: bytes, fittedFrom: [...points.values()].map(p => p.job.id)} : null;
}
