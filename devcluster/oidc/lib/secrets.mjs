// Signing keys and cookie keys, made on first start and kept in the data dir:
// a demo restarted with the same data dir keeps its JWKS, so relying parties
// and kube-apiserver do not hold a stale key; a test gets a fresh dir and key.

import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

// RFC 7638 thumbprint, a stable and unique `kid`.
function thumbprint({ e, kty, n }) {
  return createHash('sha256').update(JSON.stringify({ e, kty, n })).digest('base64url');
}

function newSecrets() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = privateKey.export({ format: 'jwk' });
  return {
    jwks: { keys: [{ ...jwk, kid: thumbprint(jwk), alg: 'RS256', use: 'sig' }] },
    cookieKeys: [randomBytes(32).toString('base64url')],
  };
}

export function loadOrCreateSecrets(dataDir) {
  const path = join(dataDir, 'secrets.json');
  if (existsSync(path)) {
    return JSON.parse(readFileSync(path, 'utf8'));
  }
  const secrets = newSecrets();
  writeFileSync(path, JSON.stringify(secrets), { mode: 0o600 });
  return secrets;
}
