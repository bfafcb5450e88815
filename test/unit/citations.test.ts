/**
 * The repository stands alone: no tracked file cites a document that is not in it. Three kinds of
 * citation are checked in every tracked text file:
 *
 *   - names of design notes kept outside the repository (the design file, the spec's sections, the
 *     research notes): never allowed;
 *   - `docs/<name>.md` and `CONTRIBUTING.md`, read from the repository root: the file must exist, and
 *     a `#section` after it must be one of its headings;
 *   - Markdown links `[text](path.md#section)`, read relative to the file that holds them: the same.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const repo = path.resolve(import.meta.dirname, '../..');
const self = path.relative(repo, import.meta.filename);

// Built from pieces so that this file does not match itself.
const outsideDocs = new RegExp(['DESIGN', '\\.md', '|spec ', '§', '|[a-z-]+-anchor', '\\.md'].join(''), 'g');
const rootCitation = /(?<![\w./-])((?:docs\/[\w-]+|CONTRIBUTING)\.md)(#[\w-]+)?/g;
const markdownLink = /\]\(([^)\s#]+\.md)(#[\w-]+)?\)/g;

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

function anchorsOf(file: string): Set<string> {
  const text = readFileSync(path.join(repo, file), 'utf8');
  const anchors = new Set<string>();
  let inFence = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) inFence = !inFence;
    const heading = !inFence && /^#{1,6} (.+)$/.exec(line);
    if (heading) anchors.add(slug(heading[1]!));
  }
  return anchors;
}

function trackedTextFiles(): string[] {
  const out = execFileSync('git', ['ls-files', '-z'], { cwd: repo, encoding: 'utf8' });
  return out
    .split('\0')
    .filter((f) => f.length > 0 && f !== self && !f.endsWith('package-lock.json'))
    .filter((f) => existsSync(path.join(repo, f)))
    .filter((f) => !readFileSync(path.join(repo, f)).includes(0));
}

/** Every broken citation in the repository, as `file:line: what`. */
function brokenCitations(): string[] {
  const problems: string[] = [];
  const check = (file: string, lineNo: number, target: string, anchor: string | undefined) => {
    const where = `${file}:${lineNo}`;
    if (!existsSync(path.join(repo, target))) {
      problems.push(`${where}: ${target} is not in the repository`);
      return;
    }
    if (anchor && !anchorsOf(target).has(anchor.slice(1))) {
      problems.push(`${where}: ${target} has no section ${anchor}`);
    }
  };
  for (const file of trackedTextFiles()) {
    const lines = readFileSync(path.join(repo, file), 'utf8').split('\n');
    lines.forEach((line, i) => {
      for (const m of line.matchAll(outsideDocs)) {
        problems.push(`${file}:${i + 1}: cites "${m[0]}", which is not in the repository`);
      }
      for (const m of line.matchAll(rootCitation)) {
        // A string literal that is only a path ('docs/guide.md' in a fixture project) is data, not a citation.
        const before = line[m.index - 1];
        if ((before === "'" || before === '"') && line[m.index + m[0].length] === before) continue;
        check(file, i + 1, m[1]!, m[2]);
      }
      if (file.endsWith('.md')) {
        for (const m of line.matchAll(markdownLink)) {
          if (/^[a-z]+:/i.test(m[1]!)) continue; // a URL
          check(file, i + 1, path.posix.normalize(path.posix.join(path.posix.dirname(file), m[1]!)), m[2]);
        }
      }
    });
  }
  return problems;
}

describe('citations', () => {
  it('turns headings into GitHub anchors', () => {
    expect(slug('Ports (network)')).toBe('ports-network');
    expect(slug('The ferry Python package')).toBe('the-ferry-python-package');
    expect(slug('Apps, environments, endpoints')).toBe('apps-environments-endpoints');
  });

  it('keeps the docs the code cites inside the repository', () => {
    for (const doc of ['docs/architecture.md', 'docs/api.md', 'CONTRIBUTING.md']) {
      expect(existsSync(path.join(repo, doc)), doc).toBe(true);
    }
  });

  it('finds no citation of a document or section that is not in the repository', () => {
    expect(brokenCitations()).toEqual([]);
  });
});
