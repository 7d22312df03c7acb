// hippo dashboard: the trial table (sort, filter, pages), stage details on click, and, on the
// live pages, a refresh of the page's content whenever the search plan changes. No library; the
// figures are SVG drawn by the server, so everything but the table shows without this script.
(function () {
  'use strict';
  const PAGE_SIZE = 50;
  const main = document.getElementById('content');
  // Table state survives a refresh of the content.
  const state = { sort: 0, descending: false, filter: '', page: 0 };

  function cellText(v) {
    if (v === null || v === undefined) return '';
    if (typeof v === 'number') return Number.isInteger(v) ? String(v) : v.toPrecision(4);
    return String(v);
  }

  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return 1;  // empty cells last either way
    if (b === null || b === undefined) return -1;
    if (typeof a === 'number' && typeof b === 'number') return a - b;
    return String(a).localeCompare(String(b));
  }

  // "lr > 0.05 status=done 3e-4": words are matched against every cell; NAME OP VALUE compares
  // one column (=, !=, <, <=, >, >=).
  function makeFilter(text, columns) {
    const tests = [];
    for (const word of text.trim().split(/\s+/).filter(Boolean)) {
      const m = word.match(/^(.+?)(<=|>=|!=|=|<|>)(.+)$/);
      const col = m ? columns.indexOf(m[1]) : -1;
      if (m && col >= 0) {
        const op = m[2], want = m[3], num = Number(want);
        tests.push(function (row) {
          const v = row[col];
          const a = typeof v === 'number' && !Number.isNaN(num) ? v : cellText(v);
          const b = typeof a === 'number' ? num : want;
          switch (op) {
            case '=': return a == b;
            case '!=': return a != b;
            case '<': return a < b;
            case '<=': return a <= b;
            case '>': return a > b;
            default: return a >= b;
          }
        });
      } else {
        const w = word.toLowerCase();
        tests.push(function (row) {
          return row.some(function (v) { return cellText(v).toLowerCase().includes(w); });
        });
      }
    }
    return function (row) { return tests.every(function (t) { return t(row); }); };
  }

  function initTable(box) {
    const data = JSON.parse(box.parentNode.querySelector('script.trial-data').textContent);
    const columns = data.columns;
    box.textContent = '';
    const controls = document.createElement('div');
    controls.className = 'table-controls';
    const input = document.createElement('input');
    input.type = 'search';
    input.placeholder = 'filter: words, or column>value (e.g. status=done)';
    input.value = state.filter;
    const info = document.createElement('span');
    const prev = document.createElement('button');
    prev.textContent = 'previous';
    const next = document.createElement('button');
    next.textContent = 'next';
    controls.append(input, prev, next, info);
    const table = document.createElement('table');
    table.className = 'trials';
    const head = table.createTHead().insertRow();
    columns.forEach(function (name, i) {
      const th = document.createElement('th');
      th.textContent = name;
      th.dataset.column = i;
      head.appendChild(th);
    });
    const body = table.createTBody();
    box.append(controls, table);

    function render() {
      const keep = makeFilter(state.filter, columns);
      const rows = data.rows.filter(keep);
      rows.sort(function (a, b) {
        const c = compare(a[state.sort], b[state.sort]);
        return state.descending ? -c : c;
      });
      const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
      state.page = Math.min(state.page, pages - 1);
      const first = state.page * PAGE_SIZE;
      body.textContent = '';
      for (const row of rows.slice(first, first + PAGE_SIZE)) {
        const tr = body.insertRow();
        tr.className = 'trial';
        tr.dataset.trial = row[0];
        for (const v of row) tr.insertCell().textContent = cellText(v);
      }
      head.querySelectorAll('th').forEach(function (th) {
        th.className = Number(th.dataset.column) === state.sort
          ? (state.descending ? 'sorted-desc' : 'sorted-asc') : '';
      });
      info.textContent = rows.length + ' of ' + data.rows.length + ' trials, page ' +
        (state.page + 1) + ' of ' + pages;
      box.dataset.shown = rows.length;
      prev.disabled = state.page === 0;
      next.disabled = state.page >= pages - 1;
    }
    head.addEventListener('click', function (e) {
      const col = Number(e.target.dataset.column);
      if (Number.isNaN(col)) return;
      state.descending = state.sort === col ? !state.descending : false;
      state.sort = col;
      render();
    });
    input.addEventListener('input', function () { state.filter = input.value; state.page = 0; render(); });
    prev.addEventListener('click', function () { state.page--; render(); });
    next.addEventListener('click', function () { state.page++; render(); });
    render();
  }

  // A stage's details below the tree: while hovered, and the clicked one after.
  function initStages(svg) {
    const details = svg.closest('figure').parentNode.querySelector('.stage-details');
    if (!details) return;
    function describe(g) {
      const d = g.dataset;
      return 'stage ' + d.stage + ': steps [' + d.start + ', ' + d.end + '), ' + d.state +
        ', trained to ' + d.trained + '; ' + d.through + ' trials through it' +
        (d.trials ? '; trials ending here: ' + d.trials : '') +
        (d.checkpoints ? '; checkpoints at steps ' + d.checkpoints : '; no checkpoint');
    }
    let chosen = '';
    svg.addEventListener('click', function (e) {
      const g = e.target.closest('.stage');
      if (!g) return;
      svg.querySelectorAll('.stage.selected').forEach(function (s) { s.classList.remove('selected'); });
      g.classList.add('selected');
      details.textContent = chosen = describe(g);
    });
    svg.addEventListener('mouseover', function (e) {
      const g = e.target.closest('.stage');
      if (g) details.textContent = describe(g);
    });
    svg.addEventListener('mouseleave', function () { details.textContent = chosen; });
  }

  // The trial under the pointer, named in the figure's caption.
  function initCurves(svg) {
    const caption = svg.closest('figure').querySelector('figcaption');
    const title = caption.textContent;
    svg.addEventListener('mouseover', function (e) {
      const p = e.target.closest('.curve');
      if (p) caption.textContent = title + ': trial ' + p.dataset.trial;
    });
    svg.addEventListener('mouseleave', function () { caption.textContent = title; });
  }

  function init() {
    main.querySelectorAll('.trial-table').forEach(initTable);
    main.querySelectorAll('svg.tree').forEach(initStages);
    main.querySelectorAll('svg.curves').forEach(initCurves);
  }

  init();
  if (document.body.dataset.live !== '1') return;

  // Live: ask for the content part every 2 s; the server answers 304 while the plan is unchanged.
  const liveState = document.querySelector('.live-state');
  let version = main.dataset.version;
  let busy = false;
  setInterval(async function () {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const r = await fetch(location.pathname + location.search, {
        headers: { 'X-Hippo-Part': 'content', 'If-None-Match': version },
        cache: 'no-store',
      });
      if (r.status === 200) {
        const html = await r.text();
        version = r.headers.get('ETag') || version;
        main.innerHTML = html;
        main.dataset.version = version;
        init();
      }
      liveState.textContent = 'live, checked ' + new Date().toLocaleTimeString();
    } catch (e) {
      liveState.textContent = 'the dashboard is not answering';
    } finally {
      busy = false;
    }
  }, 2000);
})();
