// A connection that logs in and behaves the way EchoMQ's connector does (echo_wire
// EchoMQ.Connector, echo_mq 2.6.5), written from the facts of its contract, not from its code:
//
//   1. HELLO 3 AUTH default <password> (plain HELLO 3 without one): the user is always the
//      literal `default`, whatever the URL names; an error other than NOAUTH/WRONGPASS falls
//      back to RESP2: AUTH <password>, then PING;
//   2. SELECT <db>, only when the URL names a database above 0;
//   3. CLIENT SETNAME <name> (this SUT always names its connections: the recorder attributes
//      calls by client name);
//   4. the version fence: GET {emq}:version; when missing, SET {emq}:version echomq:3.0.0 NX
//      and GET again; any other value is fatal;
//   5. then commands are pipelined (RESP3). A call in flight when the connection breaks fails
//      with `disconnected` and is never replayed; the connection comes back with a backoff of
//      100 ms doubling to 2 s (with jitter), running 1-4 again.
//
// Scripts are called EVALSHA-first; on NOSCRIPT (a restarted server) the source is sent with
// SCRIPT LOAD and the same EVALSHA again. Error replies (EMQSTALE ...) reject with ReplyError.
// No dependency: ioredis, the other Node example's client, cannot speak RESP3, so it could not
// send the HELLO 3 login EchoMQ's connector sends.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const net = require('net');
const path = require('path');

const VERSION_KEY = '{emq}:version';
const VERSION = 'echomq:3.0.0';

class ReplyError extends Error {}

// An out-of-band RESP3 push (not the reply to a command).
class Push {
  constructor(items) {
    this.items = items;
  }
}

const INCOMPLETE = Symbol('incomplete');
let warnedUser = false;

// A RESP3 reply reader (RESP2 is a subset of it). Pushes come back marked, to be skipped.
class Reader {
  constructor() {
    this.buffer = Buffer.alloc(0);
    this.offset = 0;
  }

  feed(chunk) {
    this.buffer = this.offset < this.buffer.length
      ? Buffer.concat([this.buffer.subarray(this.offset), chunk]) : chunk;
    this.offset = 0;
  }

  // The next whole reply, or INCOMPLETE (nothing consumed).
  next() {
    const start = this.offset;
    try {
      return this.read();
    } catch (error) {
      if (error !== INCOMPLETE) throw error;
      this.offset = start;
      return INCOMPLETE;
    }
  }

  line() {
    const end = this.buffer.indexOf('\r\n', this.offset);
    if (end < 0) throw INCOMPLETE;
    const text = this.buffer.toString('utf8', this.offset, end);
    this.offset = end + 2;
    return text;
  }

  bulk(length) {
    if (this.buffer.length < this.offset + length + 2) throw INCOMPLETE;
    const text = this.buffer.toString('utf8', this.offset, this.offset + length);
    this.offset += length + 2;
    return text;
  }

  read() {
    if (this.offset >= this.buffer.length) throw INCOMPLETE;
    const type = String.fromCharCode(this.buffer[this.offset]);
    this.offset += 1;
    const head = this.line();
    const count = Number(head);
    switch (type) {
      case '+': return head;
      case '-': return new ReplyError(head);
      case ':': case ',': return count;
      case '(': return head; // a big number, as its digits
      case '#': return head === 't';
      case '_': return null;
      case '$': return count < 0 ? null : this.bulk(count);
      case '=': return this.bulk(count).slice(4); // verbatim: "txt:" first
      case '!': return new ReplyError(this.bulk(count));
      case '*': case '~': case '>': {
        if (count < 0) return null;
        const items = [];
        for (let i = 0; i < count; i += 1) items.push(this.read());
        return type === '>' ? new Push(items) : items;
      }
      case '%': case '|': {
        const map = {};
        for (let i = 0; i < count; i += 1) {
          const key = this.read();
          map[String(key)] = this.read();
        }
        return type === '|' ? this.read() : map; // an attribute precedes the reply it annotates
      }
      default:
        throw new Error(`RESP: unknown reply type ${JSON.stringify(type)}`);
    }
  }
}

function encode(args) {
  let out = `*${args.length}\r\n`;
  for (const arg of args) {
    const text = String(arg);
    out += `$${Buffer.byteLength(text)}\r\n${text}\r\n`;
  }
  return out;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

class Connection {
  // url: redis://[user]:password@host:port[/db]; name: CLIENT SETNAME; log(event, fields).
  constructor(url, name, log) {
    const parsed = new URL(url);
    this.host = parsed.hostname;
    this.port = Number(parsed.port || 6379);
    this.password = parsed.password ? decodeURIComponent(parsed.password) : '';
    this.database = Number(parsed.pathname.replace('/', '') || 0);
    const user = decodeURIComponent(parsed.username || '');
    if (user && user !== 'default' && !warnedUser) {
      warnedUser = true; // once a process
      log('warning', { msg: `user ${user} ignored: EchoMQ's connector logs in as default` });
    }
    this.name = name;
    this.log = log;
    this.socket = null;
    this.ready = false;
    this.closing = false;
    this.waiting = []; // {resolve, reject} of each command written, in order
    this.backoffMs = 100;
  }

  // Connect and boot; resolves once the first boot is through (rejects if it fails).
  async open() {
    await this.boot();
  }

  async boot() {
    const socket = net.createConnection({ host: this.host, port: this.port });
    socket.setNoDelay(true);
    await new Promise((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    const reader = new Reader();
    this.socket = socket;
    const waiting = [];
    this.waiting = waiting;
    socket.on('data', (chunk) => {
      reader.feed(chunk);
      for (;;) {
        let reply;
        try {
          reply = reader.next();
        } catch (error) {
          socket.destroy(error);
          return;
        }
        if (reply === INCOMPLETE) return;
        if (reply instanceof Push) continue;
        const entry = waiting.shift();
        if (entry === undefined) continue;
        if (reply instanceof ReplyError) entry.reject(reply);
        else entry.resolve(reply);
      }
    });
    socket.on('error', () => {}); // 'close' follows
    socket.on('close', () => this.lost(socket, waiting));
    const hello = this.password ? ['HELLO', '3', 'AUTH', 'default', this.password] : ['HELLO', '3'];
    try {
      await this.raw(hello);
    } catch (error) {
      if (!(error instanceof ReplyError) || /NOAUTH|WRONGPASS/.test(error.message)) throw error;
      if (this.password) await this.raw(['AUTH', this.password]);
      await this.raw(['PING']);
    }
    if (this.database > 0) await this.raw(['SELECT', String(this.database)]);
    await this.raw(['CLIENT', 'SETNAME', this.name]);
    let version = await this.raw(['GET', VERSION_KEY]);
    if (version === null) {
      await this.raw(['SET', VERSION_KEY, VERSION, 'NX']);
      version = await this.raw(['GET', VERSION_KEY]);
    }
    if (version !== VERSION) {
      this.log('fatal', { msg: `version fence: ${VERSION_KEY} is ${JSON.stringify(version)}` });
      process.exit(3);
    }
    this.ready = true;
    this.backoffMs = 100;
  }

  raw(args) {
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.socket.write(encode(args));
    });
  }

  // One command; rejects at once with `disconnected` while the connection is down.
  call(...args) {
    if (!this.ready) return Promise.reject(new Error('disconnected'));
    return this.raw(args);
  }

  // The socket closed: its calls in flight fail; a booted connection that broke comes back
  // (a boot that failed is retried by whoever ran it).
  lost(socket, waiting) {
    for (const entry of waiting.splice(0)) entry.reject(new Error('disconnected'));
    if (socket !== this.socket) return;
    const wasReady = this.ready;
    this.ready = false;
    if (wasReady && !this.closing) this.reconnect();
  }

  async reconnect() {
    while (!this.closing) {
      const wait = this.backoffMs / 2 + Math.random() * (this.backoffMs / 2);
      this.backoffMs = Math.min(this.backoffMs * 2, 2000);
      await sleep(wait);
      try {
        await this.boot();
        this.log('reconnected', {});
        return;
      } catch (error) {
        if (this.socket) this.socket.destroy();
        this.log('reconnect_failed', { error: error.message });
      }
    }
  }

  close() {
    this.closing = true;
    this.ready = false;
    if (this.socket) this.socket.end();
  }
}

// The scripts of lua/, each with its SHA1 (what SCRIPT LOAD answers for it).
class Scripts {
  constructor(names) {
    this.byName = {};
    for (const name of names) {
      const source = fs.readFileSync(path.join(__dirname, 'lua', `${name}.lua`), 'utf8');
      const sha = crypto.createHash('sha1').update(source).digest('hex');
      this.byName[name] = { source, sha };
    }
  }

  // SCRIPT LOAD each once (the server's script cache is shared by every connection).
  async load(connection) {
    for (const script of Object.values(this.byName)) {
      const sha = await connection.call('SCRIPT', 'LOAD', script.source);
      if (sha !== script.sha) throw new Error(`SCRIPT LOAD answered ${sha}, not ${script.sha}`);
    }
  }

  async run(connection, name, keys, argv) {
    const script = this.byName[name];
    const args = ['EVALSHA', script.sha, String(keys.length), ...keys, ...argv];
    try {
      return await connection.call(...args);
    } catch (error) {
      if (!(error instanceof ReplyError) || !error.message.startsWith('NOSCRIPT')) throw error;
      await connection.call('SCRIPT', 'LOAD', script.source);
      return connection.call(...args);
    }
  }
}

module.exports = { Connection, ReplyError, Scripts, sleep, VERSION, VERSION_KEY };
