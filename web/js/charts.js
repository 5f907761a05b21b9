// A job's live charts: one Chart.js line chart per group of metric keys
// (brioche train's log.jsonl rows as GET .../metrics returns them: `kind`
// "step" or "eval", TRL's names for the preference terms), plus one chart for
// each other numeric key a row carries, all on a shared step axis, with the
// best-margin step marked by a dashed vertical line.
import {el} from './ui.js';

// series: the rows of `kind` that carry `key`; `scale` converts the value for display.
export const CHART_SPECS = [
  {id: 'loss', title: 'Loss', series: [{label: 'train', kind: 'step', key: 'loss'}, {label: 'eval', kind: 'eval', key: 'loss'}]},
  {id: 'nll', title: 'NLL (chosen)', series: [{label: 'train', kind: 'step', key: 'nll_loss'}, {label: 'eval', kind: 'eval', key: 'nll'}]},
  {id: 'odds', title: 'Odds-ratio term', series: [{label: 'log σ(log-odds), train', kind: 'step', key: 'log_odds_ratio'},
    {label: 'log-odds chosen, train', kind: 'step', key: 'log_odds_chosen'}, {label: 'eval', kind: 'eval', key: 'or'}]},
  {id: 'accuracy', title: 'Accuracy (chosen ahead)', series: [{label: 'train', kind: 'step', key: 'rewards/accuracies'},
    {label: 'eval', kind: 'eval', key: 'accuracy'}]},
  {id: 'margin', title: 'Margin (eval: mean log-prob gap)', series: [{label: 'eval', kind: 'eval', key: 'margin'}]},
  {id: 'logps', title: 'Chosen / rejected log-probs', series: [
    {label: 'chosen, train', kind: 'step', key: 'logps/chosen'}, {label: 'rejected, train', kind: 'step', key: 'logps/rejected'},
    {label: 'chosen, eval', kind: 'eval', key: 'chosen_logp'}, {label: 'rejected, eval', kind: 'eval', key: 'rejected_logp'}]},
  {id: 'rewards', title: 'Rewards', series: [{label: 'chosen', kind: 'step', key: 'rewards/chosen'},
    {label: 'rejected', kind: 'step', key: 'rewards/rejected'}, {label: 'margin', kind: 'step', key: 'rewards/margins'}]},
  {id: 'lr', title: 'Learning rate', series: [{label: 'lr', kind: 'step', key: 'learning_rate'}]},
  {id: 'grad_norm', title: 'Gradient norm', series: [{label: 'grad norm', kind: 'step', key: 'grad_norm'}]},
  {id: 'tokens_per_s', title: 'Tokens/s', series: [{label: 'train', kind: 'step', key: 'tokens_per_s'},
    {label: 'eval', kind: 'eval', key: 'tokens_per_s'}]},
  {id: 'memory', title: 'Peak memory (MB)', series: [{label: 'peak', kind: 'step', key: 'peak_memory_bytes', scale: 1e-6},
    {label: 'peak, eval', kind: 'eval', key: 'peak_memory_bytes', scale: 1e-6}]},
];

// Keys that are axes, counters or copies, not curves of their own.
const NOT_CHARTED = new Set(['step', 'kind', 'event', 'epoch', 'tokens', 'total_steps', 'train_loss', 'time', 'elapsed_seconds',
  'examples']);
const COLORS = ['#b4621a', '#2563eb', '#16a34a', '#9333ea', '#dc2626', '#0891b2', '#ca8a04'];

// Chart.js plugin: a dashed vertical line at options.plugins.bestStep.step.
const bestStepLine = {
  id: 'bestStep',
  afterDatasetsDraw(chart, _args, options) {
    if (options.step === null || options.step === undefined) return;
    const x = chart.scales.x.getPixelForValue(options.step);
    const {top, bottom, left, right} = chart.chartArea;
    if (x < left || x > right) return;
    const ctx = chart.ctx;
    ctx.save();
    ctx.strokeStyle = '#16a34a';
    ctx.setLineDash([4, 3]);
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, bottom);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = '#16a34a';
    ctx.font = '10px system-ui, sans-serif';
    ctx.fillText(`best margin @${options.step}`, Math.min(x + 3, right - 90), top + 10);
    ctx.restore();
  },
};

export class JobCharts {
  constructor(container) {
    this.container = container;
    this.rows = new Map();    // "kind:step" -> row (a resumed step replaces its row)
    this.charts = new Map();  // spec id -> {chart, card, spec}
    this.bestStep = null;
  }

  clear() {
    for (const {chart} of this.charts.values()) chart.destroy();
    this.charts.clear();
    this.rows.clear();
    this.container.replaceChildren();
    this.bestStep = null;
  }

  // The largest step seen (for GET .../metrics?after_step=).
  lastStep() {
    let last = 0;
    for (const row of this.rows.values()) last = Math.max(last, row.step);
    return last;
  }

  addRows(rows, bestStep) {
    for (const row of rows) {
      if (typeof row.step !== 'number') continue;
      this.rows.set(`${row.kind || 'step'}:${row.step}`, row);
    }
    if (bestStep !== undefined && bestStep !== null) this.bestStep = bestStep;
    else this.bestStep = this.bestMarginStep();
    this.render();
  }

  // The eval step with the largest margin (the server's best_margin_step
  // wins when it sends one).
  bestMarginStep() {
    let best = null;
    for (const row of this.rows.values()) {
      if (row.kind === 'eval' && typeof row.margin === 'number' && row.step > 0 && (best === null || row.margin > best.margin)) best = row;
    }
    return best ? best.step : null;
  }

  specs() {
    const covered = new Set();
    for (const spec of CHART_SPECS) for (const s of spec.series) covered.add(s.key);
    const extra = new Set();
    for (const row of this.rows.values()) {
      for (const [key, value] of Object.entries(row)) {
        if (typeof value === 'number' && !covered.has(key) && !NOT_CHARTED.has(key)) extra.add(key);
      }
    }
    return [...CHART_SPECS, ...[...extra].sort().map(key => ({id: `x-${key}`, title: key,
      series: [{label: 'train', kind: 'step', key}, {label: 'eval', kind: 'eval', key}]}))];
  }

  render() {
    const sorted = [...this.rows.values()].sort((a, b) => a.step - b.step);
    for (const spec of this.specs()) {
      const datasets = spec.series.map((s, i) => ({
        label: s.label,
        data: sorted.filter(r => (r.kind || 'step') === s.kind && typeof r[s.key] === 'number')
          .map(r => ({x: r.step, y: r[s.key] * (s.scale || 1)})),
        borderColor: COLORS[i % COLORS.length],
        backgroundColor: COLORS[i % COLORS.length],
        borderWidth: 1.5,
        borderDash: s.kind === 'eval' ? [5, 3] : [],
        pointRadius: s.kind === 'eval' ? 3 : (sorted.length > 60 ? 0 : 2),
        tension: 0,
      })).filter(d => d.data.length > 0);
      const points = datasets.reduce((n, d) => n + d.data.length, 0);
      let entry = this.charts.get(spec.id);
      if (points === 0) continue;
      if (!entry) entry = this.create(spec);
      entry.chart.data.datasets = datasets;
      entry.chart.options.plugins.bestStep.step = this.bestStep;
      entry.chart.update('none');
      entry.card.dataset.points = String(points);
    }
  }

  create(spec) {
    const canvas = el('canvas');
    const card = el('div', {class: 'chart-card', dataset: {chart: spec.id, points: '0'}},
      el('h4', {}, spec.title), el('div', {class: 'chart-box'}, canvas));
    // Charts keep the order of CHART_SPECS: insert before the first later one.
    const order = this.specs().map(s => s.id);
    const later = [...this.container.children].find(c => order.indexOf(c.dataset.chart) > order.indexOf(spec.id));
    this.container.insertBefore(card, later || null);
    const chart = new window.Chart(canvas, {
      type: 'line',
      data: {datasets: []},
      plugins: [bestStepLine],
      options: {
        animation: false,
        maintainAspectRatio: false,
        interaction: {mode: 'nearest', axis: 'x', intersect: false},
        scales: {
          x: {type: 'linear', title: {display: true, text: 'step', font: {size: 10}}, ticks: {font: {size: 10}, precision: 0}},
          y: {ticks: {font: {size: 10}}},
        },
        plugins: {
          legend: {labels: {boxWidth: 10, font: {size: 10}}},
          bestStep: {step: null},
        },
      },
    });
    const entry = {chart, card, spec};
    this.charts.set(spec.id, entry);
    return entry;
  }
}
