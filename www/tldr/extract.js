// Main-content extraction for the TL;DR widget: find the element that holds the page's
// article (an <article>, <main> or role=main with enough text, else the element whose
// paragraphs carry the most non-link text, as readability-style extractors score it), then
// collect its headings, paragraphs, list items and quotes, skipping navigation, asides,
// forms, hidden elements and the widget itself.

const SKIP_TAGS = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'NAV', 'ASIDE', 'FOOTER', 'FORM',
  'BUTTON', 'SELECT', 'TEXTAREA', 'INPUT', 'IFRAME', 'SVG', 'CANVAS', 'VIDEO', 'AUDIO', 'TLDR-WIDGET']);
const BLOCK_TAGS = new Set(['P', 'H1', 'H2', 'H3', 'H4', 'H5', 'H6', 'LI', 'BLOCKQUOTE', 'PRE', 'FIGCAPTION',
  'DD', 'DT', 'TD', 'TH']);
const NOISE = /(^|[\s_-])(comment|comments|sidebar|footer|footnote|nav|navbar|menu|share|social|promo|advert|ad|ads|related|newsletter|cookie|banner|breadcrumb|popup|modal)([\s_-]|$)/i;

/** @param {Element} e */
function skipped(e) {
  if (SKIP_TAGS.has(e.tagName.toUpperCase())) return true;
  if (e.hidden || e.getAttribute('aria-hidden') === 'true') return true;
  const role = e.getAttribute('role');
  if (role === 'navigation' || role === 'complementary' || role === 'banner' || role === 'contentinfo') return true;
  const cls = `${e.id} ${typeof e.className === 'string' ? e.className : ''}`;
  return NOISE.test(cls);
}

const clean = (s) => s.replace(/\s+/g, ' ').trim();

/** Text of links inside `e`. @param {Element} e */
function linkTextLength(e) {
  let n = 0;
  for (const a of e.querySelectorAll('a')) n += clean(a.textContent ?? '').length;
  return n;
}

/**
 * The element holding the page's main content.
 * @param {Document} doc
 * @returns {Element}
 */
export function mainElement(doc = document) {
  const body = doc.body ?? doc.documentElement;
  const explicit = [...doc.querySelectorAll('article, main, [role="main"]')]
    .filter((e) => !e.closest('tldr-widget'))
    .map((e) => ({ e, n: clean(e.textContent ?? '').length }))
    .filter(({ n }) => n >= 200);
  if (explicit.length) {
    // The innermost long enough candidate (an <article> inside <main>), the longest if several.
    const inner = explicit.filter(({ e }) => !explicit.some((o) => o.e !== e && e.contains(o.e)));
    inner.sort((a, b) => b.n - a.n);
    return inner[0].e;
  }
  // Score parents of paragraphs by their text, less the text of links.
  const scores = new Map();
  for (const p of body.querySelectorAll('p, pre, blockquote, td')) {
    if (p.closest('tldr-widget') || [...ancestors(p)].some(skipped)) continue;
    const text = clean(p.textContent ?? '');
    if (text.length < 40) continue;
    const score = Math.max(0, text.length - 2 * linkTextLength(p)) + 10 * (text.match(/[,.;]/g)?.length ?? 0);
    const parent = p.parentElement;
    const grand = parent?.parentElement;
    if (parent) scores.set(parent, (scores.get(parent) ?? 0) + score);
    if (grand) scores.set(grand, (scores.get(grand) ?? 0) + score / 2);
  }
  let best = body;
  let bestScore = 0;
  for (const [e, s] of scores) {
    if (s > bestScore) { best = e; bestScore = s; }
  }
  return best;
}

/** @param {Element} e */
function* ancestors(e) {
  for (let a = e.parentElement; a; a = a.parentElement) yield a;
}

/**
 * The page's main text: title, then the blocks of the main element, one per paragraph.
 * @param {Document} doc
 * @returns {{ title: string, text: string, element: Element }}
 */
export function extractMainText(doc = document) {
  const root = mainElement(doc);
  const blocks = [];
  const walk = (e) => {
    for (const child of e.children) {
      if (skipped(child) && child !== root) continue;
      if (BLOCK_TAGS.has(child.tagName.toUpperCase())) {
        const text = clean(/** @type {HTMLElement} */ (child).innerText ?? child.textContent ?? '');
        if (text) blocks.push(text);
      } else {
        walk(child);
      }
    }
  };
  walk(root);
  // A main element of loose text (no block children): take its text as one block.
  if (blocks.length === 0) {
    const text = clean(/** @type {HTMLElement} */ (root).innerText ?? root.textContent ?? '');
    if (text) blocks.push(text);
  }
  const h1 = root.querySelector('h1') ?? doc.querySelector('h1');
  const title = clean(h1?.textContent ?? doc.title ?? '');
  if (title && blocks[0] !== title) blocks.unshift(title);
  return { title, text: blocks.join('\n\n'), element: root };
}

/**
 * The current selection's text, unless it lies inside `exclude` (the widget).
 * @param {Node} [exclude]
 */
export function selectedText(exclude) {
  const sel = getSelection();
  if (!sel || sel.isCollapsed || sel.rangeCount === 0) return '';
  const node = sel.getRangeAt(0).commonAncestorContainer;
  if (exclude && exclude.contains(node)) return '';
  return sel.toString().trim();
}
