/**
 * The webhook outbox in SQLite (core/webhooks.ts): a delivery is a row until it succeeds or runs out
 * of attempts, so a restart resumes pending deliveries and their retries instead of losing them.
 */
import type Database from 'better-sqlite3';
import type { OutboxEntry, WebhookOutbox } from '../../webhooks.js';

interface Row {
  id: number;
  url: string;
  body: string;
  attempt: number;
  next_at: number;
}

export class SqliteWebhookOutbox implements WebhookOutbox {
  readonly #insert;
  readonly #due;
  readonly #reschedule;
  readonly #remove;

  constructor(db: Database.Database) {
    db.exec(`CREATE TABLE IF NOT EXISTS webhook_outbox (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      url TEXT NOT NULL,
      body TEXT NOT NULL,
      attempt INTEGER NOT NULL,
      next_at INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS webhook_outbox_by_next ON webhook_outbox (next_at);`);
    this.#insert = db.prepare<[string, string, number, number]>(
      'INSERT INTO webhook_outbox (url, body, attempt, next_at) VALUES (?, ?, ?, ?)',
    );
    this.#due = db.prepare<[number, number], Row>(
      'SELECT id, url, body, attempt, next_at FROM webhook_outbox WHERE next_at <= ? ORDER BY next_at, id LIMIT ?',
    );
    this.#reschedule = db.prepare<[number, number, number]>(
      'UPDATE webhook_outbox SET attempt = ?, next_at = ? WHERE id = ?',
    );
    this.#remove = db.prepare<[number]>('DELETE FROM webhook_outbox WHERE id = ?');
  }

  async add(entry: Omit<OutboxEntry, 'id'>): Promise<number> {
    return Number(this.#insert.run(entry.url, entry.body, entry.attempt, entry.nextAtMs).lastInsertRowid);
  }

  async due(nowMs: number, limit: number): Promise<OutboxEntry[]> {
    return this.#due
      .all(nowMs, limit)
      .map((r) => ({ id: r.id, url: r.url, body: r.body, attempt: r.attempt, nextAtMs: r.next_at }));
  }

  async reschedule(id: number, attempt: number, nextAtMs: number): Promise<void> {
    this.#reschedule.run(attempt, nextAtMs, id);
  }

  async remove(id: number): Promise<void> {
    this.#remove.run(id);
  }
}
