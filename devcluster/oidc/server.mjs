// Berth's local OpenID Connect provider: panva/oidc-provider over HTTPS on a
// loopback address, configured from one JSON file (written by devcluster/oidc.py).
//
//   node server.mjs <config.json>
//
// config.json: { host, port (0 = any free port), dataDir, usersFile,
//   tls: { certFile, keyFile }, clients: [client metadata], api: { resource,
//   audience, scope }, ttl: { <oidc-provider ttl name>: seconds } }
//
// Once listening it writes <dataDir>/ready.json ({ issuer, port, pid }).
// Logs are JSON lines on stdout, which the wrapper sends to <dataDir>/provider.log.

import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:https';
import { join } from 'node:path';

import Provider, { errors } from 'oidc-provider';

import { accountStore } from './lib/accounts.mjs';
import { interactionRoutes } from './lib/interactions.mjs';
import { loadOrCreateSecrets } from './lib/secrets.mjs';
import { errorPage, loggedOutPage, logoutPage } from './lib/views.mjs';

const DEFAULT_TTL = {
  AccessToken: 60 * 60,
  AuthorizationCode: 60,
  IdToken: 60 * 60,
  RefreshToken: 24 * 60 * 60,
  Interaction: 60 * 60,
  Session: 24 * 60 * 60,
  Grant: 24 * 60 * 60,
};

const LOGGED_EVENTS = [
  'server_error', 'authorization.error', 'grant.error', 'userinfo.error',
  'end_session.error', 'revocation.error', 'jwks.error', 'discovery.error',
  'grant.success', 'end_session.success',
];

function log(event, fields = {}) {
  console.log(JSON.stringify({ time: new Date().toISOString(), event, ...fields }));
}

// Test servers (the portal's live server, kubelogin) listen on whatever port is
// free, so a registered http://127.0.0.1/... or http://localhost/... redirect
// matches the same URI on any port. RFC 8252 allows this for native clients;
// here, bound to loopback only, it applies to every client and to
// post-logout redirects too.
const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

function withoutLoopbackPort(uri) {
  let url;
  try {
    url = new URL(uri);
  } catch {
    return undefined;
  }
  if (url.protocol !== 'http:' || !LOOPBACK_HOSTS.has(url.hostname)) return undefined;
  url.port = '';
  return url.href;
}

function allowAnyLoopbackPort(Client) {
  const checks = {
    redirectUriAllowed: 'redirectUris',
    postLogoutRedirectUriAllowed: 'postLogoutRedirectUris',
  };
  for (const [method, registered] of Object.entries(checks)) {
    const exact = Client.prototype[method];
    Client.prototype[method] = function allowedOnAnyLoopbackPort(value) {
      if (exact.call(this, value)) return true;
      const wanted = withoutLoopbackPort(value);
      return wanted !== undefined
        && (this[registered] ?? []).some((uri) => withoutLoopbackPort(uri) === wanted);
    };
  }
}

function providerConfiguration({ config, accounts, secrets }) {
  const ttl = { ...DEFAULT_TTL, ...config.ttl };
  const { api } = config;
  return {
    clients: config.clients,
    findAccount: accounts.findAccount,
    jwks: secrets.jwks,
    cookies: {
      keys: secrets.cookieKeys,
      long: { signed: true, httpOnly: true, sameSite: 'lax' },
      short: { signed: true, httpOnly: true, sameSite: 'lax' },
    },
    claims: {
      openid: ['sub'],
      profile: ['name', 'preferred_username'],
      email: ['email', 'email_verified'],
      groups: ['groups'],
    },
    scopes: ['openid', 'offline_access', 'profile', 'email', 'groups'],
    // Scope claims (groups above all) go into the ID token too, not only
    // userinfo: kube-apiserver and the portal read groups from the ID token.
    conformIdTokenClaims: false,
    enabledJWA: {
      idTokenSigningAlgValues: ['RS256'],
      userinfoSigningAlgValues: ['RS256'],
    },
    responseTypes: ['code'],
    clientAuthMethods: ['client_secret_basic', 'client_secret_post', 'none'],
    pkce: { methods: ['S256'], required: () => true },
    // Refresh tokens for every client allowed the grant, not only with
    // offline_access (which OIDC ties to an explicit consent prompt). They end
    // with the sign-in session, so RP-initiated logout revokes them.
    issueRefreshToken: async (_ctx, client, code) => (
      client.grantTypeAllowed('refresh_token') && code.scopes.has('openid')
    ),
    features: {
      devInteractions: { enabled: false },
      revocation: { enabled: true },
      userinfo: { enabled: true },
      rpInitiatedLogout: {
        enabled: true,
        logoutSource: async (ctx, form) => { ctx.body = logoutPage({ form, host: ctx.host }); },
        postLogoutSuccessSource: async (ctx) => {
          ctx.body = loggedOutPage({ client: ctx.oidc.client });
        },
      },
      // Every authorization also grants the portal API as a resource. A token
      // request naming it (resource=<api.resource>) gets a JWT access token for
      // that API; one without it gets an opaque token for userinfo, which
      // refuses tokens meant for another audience.
      resourceIndicators: {
        enabled: true,
        defaultResource: async (_ctx, _client, oneOf) => oneOf ?? api.resource,
        getResourceServerInfo: async (_ctx, resourceIndicator) => {
          if (resourceIndicator !== api.resource) throw new errors.InvalidTarget();
          return {
            scope: api.scope,
            audience: api.audience,
            accessTokenTTL: ttl.AccessToken,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
    extraTokenClaims: async (_ctx, token) => (
      token.kind === 'AccessToken' && token.resourceServer
        ? accounts.accessTokenClaims(token.accountId)
        : undefined
    ),
    ttl,
    clientBasedCORS: () => false,
    interactions: { url: async (_ctx, interaction) => `/interaction/${interaction.uid}` },
    renderError: async (ctx, out) => {
      ctx.type = 'html';
      ctx.body = errorPage(out);
    },
  };
}

function accessLog() {
  return async function logRequest(ctx, next) {
    const started = process.hrtime.bigint();
    try {
      await next();
    } finally {
      const ms = Number((process.hrtime.bigint() - started) / 1_000_000n);
      log('http', { method: ctx.method, path: ctx.path, status: ctx.status, ms });
    }
  };
}

function buildProvider(issuer, config) {
  const accounts = accountStore(config.usersFile);
  const secrets = loadOrCreateSecrets(config.dataDir);
  const provider = new Provider(issuer, providerConfiguration({ config, accounts, secrets }));
  allowAnyLoopbackPort(provider.Client);
  provider.use(accessLog());
  provider.use(interactionRoutes({ provider, accounts, log }));
  for (const event of LOGGED_EVENTS) {
    provider.on(event, (ctx, err) => log(event, {
      client: ctx?.oidc?.client?.clientId,
      error: err?.error ?? err?.message,
      description: err?.error_description,
      detail: err?.error_detail,
    }));
  }
  return provider;
}

// oidc-provider validates static clients on first use; a broken client config
// should stop the start instead of failing someone's sign-in later.
async function validateClients(provider, clients) {
  for (const { client_id: clientId } of clients) {
    await provider.Client.find(clientId);
  }
}

function writeReadyFile(dataDir, ready) {
  const path = join(dataDir, 'ready.json');
  writeFileSync(`${path}.tmp`, JSON.stringify(ready));
  renameSync(`${path}.tmp`, path);
}

function main(configPath) {
  const config = JSON.parse(readFileSync(configPath, 'utf8'));
  const tls = { cert: readFileSync(config.tls.certFile), key: readFileSync(config.tls.keyFile) };
  // The issuer names the real port, known only after listen() when port is 0,
  // so requests wait behind a placeholder until the provider exists.
  let handler = (_req, res) => { res.statusCode = 503; res.end(); };
  const server = createServer(tls, (req, res) => handler(req, res));
  server.listen(config.port, config.host, async () => {
    const { port } = server.address();
    const issuer = `https://${config.host}:${port}`;
    const provider = buildProvider(issuer, config);
    try {
      await validateClients(provider, config.clients);
    } catch (err) {
      log('config.error', { error: err.message, description: err.error_description });
      process.exit(1);
    }
    handler = provider.callback();
    writeReadyFile(config.dataDir, { issuer, port, pid: process.pid });
    log('listening', { issuer, node: process.version });
  });
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.on(signal, () => {
      log('stopping', { signal });
      process.exit(0);
    });
  }
}

main(process.argv[2]);
