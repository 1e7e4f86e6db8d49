// EchoMQ's branded ids (echo_data), from the facts of its contract: 3 capitals (the namespace,
// JOB for jobs) and 11 base62 characters (0-9, A-Z, a-z; most significant first, padded with
// '0', so lexicographic order is numeric order) of a 63-bit snowflake:
//
//   (unix_ms - 2024-01-01T00:00:00Z) << 22 | node (10 bits) << 12 | sequence (12 bits)
//
// Per process a cell holds ms_since_epoch << 12 | seq; each mint takes the larger of
// now << 12 and the last value + 1 (the sequence counts within a ms, carries into the ms when
// it overflows, and a clock that steps back keeps counting from the last value); the node bits
// go in afterwards. Each process mints with a node of its own, or two processes minting in the
// same ms make the same id.
'use strict';

const EPOCH_MS = 1704067200000n;
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const WIDTH = 11;
const LARGEST = (1n << 63n) - 1n;

function base62(value) {
  let digits = '';
  let rest = value;
  do {
    digits = ALPHABET[Number(rest % 62n)] + digits;
    rest /= 62n;
  } while (rest > 0n);
  return digits.padStart(WIDTH, '0');
}

function decode(id) {
  if (!/^[A-Z]{3}[0-9A-Za-z]{11}$/.test(id)) throw new Error(`not a branded id: ${id}`);
  let value = 0n;
  for (const char of id.slice(3)) value = value * 62n + BigInt(ALPHABET.indexOf(char));
  if (value > LARGEST) throw new Error(`not a branded id (past 2^63 - 1): ${id}`);
  return {
    namespace: id.slice(0, 3),
    snowflake: value,
    unixMs: Number((value >> 22n) + EPOCH_MS),
    node: Number((value >> 12n) & 1023n),
    sequence: Number(value & 4095n),
  };
}

class Minter {
  constructor(node, now = Date.now) {
    if (!Number.isInteger(node) || node < 0 || node > 1023) {
      throw new Error(`node ${node}: expected 0..1023`);
    }
    this.node = BigInt(node);
    this.now = now;
    this.cell = 0n;
  }

  mint(namespace = 'JOB') {
    const fresh = (BigInt(this.now()) - EPOCH_MS) << 12n;
    this.cell = fresh > this.cell ? fresh : this.cell + 1n;
    const snowflake = ((this.cell >> 12n) << 22n) | (this.node << 12n) | (this.cell & 4095n);
    return namespace + base62(snowflake);
  }
}

module.exports = { Minter, decode, base62 };
