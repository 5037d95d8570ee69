// Decodes and encodes Sparkplug B payloads with Eclipse Tahu's JavaScript
// library (npm sparkplug-payload), for the Go tests: an implementation
// written elsewhere, to check this module's against.
//
//   node tahu.js decode   stdin: one base64 payload a line
//                         stdout: one JSON object a line, Tahu's decoding
//                         with 64-bit integers as decimal strings and
//                         bytes as base64
//   node tahu.js encode   stdin: one JSON payload object a line, as Tahu's
//                         encodePayload takes it; stdout: base64 lines
//
// The library is found through NODE_PATH.
'use strict';
const sparkplug = require('sparkplug-payload').get('spBv1.0');
const readline = require('readline');

function plain(v) {
  if (v === null || v === undefined) return v === null ? null : undefined;
  if (typeof v === 'object' && typeof v.low === 'number' && typeof v.high === 'number' && typeof v.unsigned === 'boolean') {
    return v.toString(); // a Long
  }
  if (v instanceof Uint8Array) return Buffer.from(v).toString('base64');
  if (Array.isArray(v)) return v.map(plain);
  if (typeof v === 'object') {
    const o = {};
    for (const k of Object.keys(v)) o[k] = plain(v[k]);
    return o;
  }
  return v;
}

const mode = process.argv[2];
if (mode !== 'decode' && mode !== 'encode') {
  console.error('usage: node tahu.js decode|encode');
  process.exit(2);
}
const rl = readline.createInterface({ input: process.stdin, terminal: false });
rl.on('line', (line) => {
  if (line === '') return;
  if (mode === 'decode') {
    const p = sparkplug.decodePayload(Buffer.from(line, 'base64'));
    process.stdout.write(JSON.stringify(plain(p)) + '\n');
  } else {
    const b = sparkplug.encodePayload(JSON.parse(line));
    process.stdout.write(Buffer.from(b).toString('base64') + '\n');
  }
});
