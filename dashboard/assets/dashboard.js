// hippo dashboard: the trial table (sort, filter, pages), stage details on click, and, on the
// live pages, a refresh of the page's content whenever the search plan changes. No library; the
// figures are SVG drawn by the server, so everything but the table shows without this script.
(function () {
  'use strict';
  const PAGE_SIZE = 50;
  const main = document.getElementById('content');
  // Table state survives a refresh of the content.
  const state = { sort: null, descending: false, filter: '', page: 0 };

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

  // The rows a table query selects, sorted, and the page of them asked for: the server's
  // table_page (dashboard/table.cc) done here, for the report's whole table.
  function localPage(columns, rows, q) {
    const keep = makeFilter(q.filter, columns);
    const shown = rows.filter(keep);
    shown.sort(function (a, b) {
      let c = compare(a[q.sort], b[q.sort]);
      if (q.descending && a[q.sort] !== null && b[q.sort] !== null) c = -c;
      return c !== 0 ? c : a[0] - b[0];
    });
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
    let page = Math.min(q.page, pages - 1);
    let found = null;
    if (q.trial !== undefined) {
      const at = shown.findIndex(function (r) { return r[0] === q.trial; });
      if (at >= 0) { page = Math.floor(at / PAGE_SIZE); found = q.trial; }
    }
    return { columns: columns, rows: shown.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE),
             total: rows.length, shown: shown.length, page: page, pages: pages, trial: found };
  }

  // The report's whole table: base64 of gzip of {columns, data: a column each but the first}.
  async function decodeArchive(text) {
    const bytes = Uint8Array.from(atob(text.trim()), function (c) { return c.charCodeAt(0); });
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    const whole = JSON.parse(await new Response(stream).text());
    const n = whole.data.length ? whole.data[0].length : 0;
    const rows = new Array(n);
    for (let i = 0; i < n; i++) {
      const row = [i + 1];
      for (const column of whole.data) row.push(column[i]);
      rows[i] = row;
    }
    return rows;
  }

  // The trial table: a first page comes with the page (the goal's best first); others come from
  // the server (data-source, the dashboard) or from the report's compressed whole table.
  function initTable(box) {
    const first = JSON.parse(box.parentNode.querySelector('script.trial-data').textContent);
    const archive = box.parentNode.querySelector('script.trial-archive');
    const source = box.dataset.source;
    const columns = first.columns;
    if (state.sort === null) { state.sort = first.sort; state.descending = first.descending; }
    let local = null;  // the report's rows, once decoded
    box.textContent = '';
    const controls = document.createElement('div');
    controls.className = 'table-controls';
    const input = document.createElement('input');
    input.type = 'search';
    input.placeholder = 'filter: words, or column>value (e.g. status=done)';
    input.value = state.filter;
    const jump = document.createElement('input');
    jump.type = 'number';
    jump.min = 1;
    jump.className = 'jump';
    jump.placeholder = 'trial #';
    jump.setAttribute('aria-label', 'jump to trial');
    const go = document.createElement('button');
    go.textContent = 'go';
    const info = document.createElement('span');
    const prev = document.createElement('button');
    prev.textContent = 'previous';
    const next = document.createElement('button');
    next.textContent = 'next';
    controls.append(input, prev, next, jump, go, info);
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

    function show(result) {
      state.page = result.page;
      body.textContent = '';
      for (const row of result.rows) {
        const tr = body.insertRow();
        tr.className = 'trial' + (row[0] === result.trial ? ' chosen' : '');
        tr.dataset.trial = row[0];
        row.forEach(function (v, i) {
          const td = tr.insertCell();
          if (i === 0 && source) {
            // The trial's number selects it in every figure of the study page.
            const a = document.createElement('a');
            a.href = location.pathname + '?trial=' + v;
            a.textContent = cellText(v);
            td.appendChild(a);
          } else {
            td.textContent = cellText(v);
          }
        });
      }
      head.querySelectorAll('th').forEach(function (th) {
        th.className = Number(th.dataset.column) === state.sort
          ? (state.descending ? 'sorted-desc' : 'sorted-asc') : '';
      });
      info.textContent = result.shown + ' of ' + result.total + ' trials, page ' +
        (result.page + 1) + ' of ' + result.pages;
      box.dataset.shown = result.shown;
      box.dataset.page = result.page;
      prev.disabled = result.page === 0;
      next.disabled = result.page >= result.pages - 1;
    }
    let asked = 0, waiting = null;
    async function render(trial) {
      const q = { sort: state.sort, descending: state.descending, filter: state.filter,
                  page: state.page, trial: trial };
      const mine = ++asked;
      let result;
      if (source) {
        const params = new URLSearchParams({ sort: q.sort, desc: q.descending ? 1 : 0,
                                             filter: q.filter, page: q.page });
        if (trial !== undefined) params.set('trial', trial);
        const r = await fetch(source + '?' + params, { cache: 'no-store' });
        if (!r.ok) { info.textContent = 'the dashboard answered ' + r.status; return; }
        result = await r.json();
      } else if (local) {
        result = localPage(columns, local, q);
      } else {
        waiting = trial;  // the report's table is still being decoded: asked again once it is
        return;
      }
      if (mine === asked) show(result);
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
    function jumpTo() {
      const n = Number(jump.value);
      if (Number.isInteger(n) && n > 0) render(n);
    }
    go.addEventListener('click', jumpTo);
    jump.addEventListener('keydown', function (e) { if (e.key === 'Enter') jumpTo(); });
    const unchanged = state.sort === first.sort && state.descending === first.descending &&
      state.filter === '' && state.page === 0;
    if (unchanged) show(first); else render();
    if (archive) {
      decodeArchive(archive.textContent).then(function (rows) {
        local = rows;
        box.dataset.decoded = rows.length;
        if (!unchanged || waiting !== null) render(waiting === null ? undefined : waiting);
      }, function (e) { info.textContent = 'the table could not be decoded: ' + e; });
    }
  }

  // A stage's details below the tree: while hovered, and the clicked one after.
  function initStages(svg) {
    const details = main.querySelector('.stage-details');  // one tree a page
    if (!details) return;
    function describe(g) {
      const d = g.dataset;
      return 'stage ' + d.stage + ': steps [' + d.start + ', ' + d.end + '), ' + d.state +
        ', trained to ' + d.trained + '; ' + d.through + ' trials through it' +
        (d.trials ? '; trials ending here: ' + d.trials : '') +
        (d.checkpoints ? '; checkpoints at steps ' + d.checkpoints : '; no checkpoint');
    }
    // The selected stage's details; on a tree page that expands (the dashboard's, past its
    // size), with a link that expands the tree below it.
    const expands = !!main.querySelector('form.expand-tree');
    let chosen = null;
    function showChosen() {
      details.textContent = chosen ? describe(chosen) : '';
      if (!chosen || !expands) return;
      const query = new URLSearchParams(location.search);
      query.set('expand', chosen.dataset.stage);
      const a = document.createElement('a');
      a.className = 'expand-below';
      a.href = location.pathname + '?' + query.toString();
      a.textContent = 'expand below this stage';
      details.append(' ', a);
    }
    svg.addEventListener('click', function (e) {
      const g = e.target.closest('.stage');
      if (!g) return;
      svg.querySelectorAll('.stage.selected').forEach(function (s) { s.classList.remove('selected'); });
      g.classList.add('selected');
      chosen = g;
      showChosen();
    });
    svg.addEventListener('mouseover', function (e) {
      const g = e.target.closest('.stage');
      if (g) details.textContent = describe(g);
    });
    svg.addEventListener('mouseleave', showChosen);
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

  // Sets up the table, tree and curves in `roots` (the whole page, or the parts that changed).
  function init(roots) {
    for (const root of roots || [main]) {
      root.querySelectorAll('.trial-table').forEach(initTable);
      root.querySelectorAll('svg.tree').forEach(initStages);
      root.querySelectorAll('svg.curves').forEach(initCurves);
    }
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
      // The parts shown now: those that did not change come back as placeholders (data-kept)
      // and keep their element, with its state (the table's page, a selected stage).
      const parts = Array.from(main.querySelectorAll('.part')).map(function (p) { return p.dataset.part; });
      const r = await fetch(location.pathname + location.search, {
        headers: { 'X-Hippo-Part': 'content', 'If-None-Match': version,
                   'X-Hippo-Parts': parts.join(' ') },
        cache: 'no-store',
      });
      if (r.status === 200) {
        const html = await r.text();
        version = r.headers.get('ETag') || version;
        const kept = {};
        main.querySelectorAll('.part').forEach(function (p) { kept[p.dataset.part] = p; });
        const fresh = document.createElement('div');
        fresh.innerHTML = html;
        const changed = [];
        fresh.querySelectorAll('.part').forEach(function (p) {
          if (p.dataset.kept && kept[p.dataset.part]) p.replaceWith(kept[p.dataset.part]);
          else changed.push(p);
        });
        main.replaceChildren.apply(main, Array.from(fresh.childNodes));
        main.dataset.version = version;
        init(changed);
      }
      liveState.textContent = 'live, checked ' + new Date().toLocaleTimeString();
    } catch (e) {
      liveState.textContent = 'the dashboard is not answering';
    } finally {
      busy = false;
    }
  }, 2000);
})();
