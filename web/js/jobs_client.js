// The fine-tuning jobs API calls more than one tab uses (docs/jobs-api.md).
import {get, ApiError} from './api.js';

// All jobs, newest first (pages of 100 through `after`). A server without
// the jobs API (404 on the route) has none.
export async function listJobs() {
  const jobs = [];
  let after = '';
  for (;;) {
    let page;
    try {
      page = await get(`v1/fine_tuning/jobs?limit=100${after ? `&after=${encodeURIComponent(after)}` : ''}`);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404 && e.code === 'not_found') return jobs;
      throw e;
    }
    jobs.push(...page.data);
    if (!page.has_more || page.data.length === 0) return jobs;
    after = page.data[page.data.length - 1].id;
  }
}

// Every metric row of a job (GET .../metrics): step rows and eval rows by step.
export async function jobMetrics(jobId, afterStep) {
  const query = afterStep === undefined ? '' : `?after_step=${afterStep}`;
  return get(`v1/fine_tuning/jobs/${encodeURIComponent(jobId)}/metrics${query}`);
}

export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);
export const METHOD_NAMES = {supervised: 'SFT', dpo: 'DPO', orpo: 'ORPO', simpo: 'SimPO', ipo: 'IPO'};

export function methodOf(job) {
  return (job.method && job.method.type) || 'supervised';
}
