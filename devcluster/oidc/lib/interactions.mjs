// The sign-in and consent steps that oidc-provider hands to the host app:
//   GET  /interaction/:uid          login form, or consent (automatic or a page)
//   POST /interaction/:uid/login    check username and password
//   POST /interaction/:uid/confirm  the consent page's "Allow"
//   GET  /interaction/:uid/abort    "Cancel": the client gets access_denied
//
// Consent is automatic: every client here is Berth's own. A client that sends
// prompt=consent (as OIDC requires for offline_access) gets a page to confirm.

import { errors } from 'oidc-provider';

import { consentPage, errorPage, loginPage } from './views.mjs';

const ROUTE = /^\/interaction\/([\w-]+)(?:\/(login|confirm|abort))?$/;
const METHODS = { show: 'GET', login: 'POST', confirm: 'POST', abort: 'GET' };
const FORM_LIMIT_BYTES = 16 * 1024;

async function readForm(ctx) {
  if (!ctx.is('application/x-www-form-urlencoded')) {
    throw new errors.InvalidRequest('expected a form post (application/x-www-form-urlencoded)');
  }
  let body = '';
  for await (const chunk of ctx.req) {
    body += chunk;
    if (body.length > FORM_LIMIT_BYTES) throw new errors.InvalidRequest('form too large');
  }
  return new URLSearchParams(body);
}

function requestedScopes({ missingOIDCScope = [], missingResourceScopes = {} }) {
  return [...new Set([...missingOIDCScope, ...Object.values(missingResourceScopes).flat()])];
}

async function grantMissing(provider, interaction) {
  const { prompt: { details }, params, session: { accountId }, grantId } = interaction;
  const grant = grantId
    ? await provider.Grant.find(grantId)
    : new provider.Grant({ accountId, clientId: params.client_id });
  if (details.missingOIDCScope) grant.addOIDCScope(details.missingOIDCScope.join(' '));
  if (details.missingOIDCClaims) grant.addOIDCClaims(details.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(details.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  return { consent: { grantId: await grant.save() } };
}

function redirectAfterPost(ctx, location) {
  ctx.redirect(location);
  ctx.status = 303;
}

function expectPrompt(interaction, name) {
  if (interaction.prompt.name !== name) {
    throw new errors.InvalidRequest(`this sign-in step expects "${interaction.prompt.name}", not "${name}"`);
  }
}

export function interactionRoutes({ provider, accounts, log }) {
  async function show(ctx, interaction, client) {
    const { uid, prompt, params } = interaction;
    if (prompt.name === 'login') {
      ctx.body = loginPage({ uid, client, username: params.login_hint });
      return;
    }
    expectPrompt(interaction, 'consent');
    if (String(params.prompt ?? '').split(' ').includes('consent')) {
      const scopes = requestedScopes(prompt.details);
      ctx.body = consentPage({ uid, client, username: interaction.session.accountId, scopes });
      return;
    }
    const result = await grantMissing(provider, interaction);
    ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, result));
  }

  async function login(ctx, interaction, client) {
    expectPrompt(interaction, 'login');
    const form = await readForm(ctx);
    const username = form.get('username')?.trim() ?? '';
    const accountId = accounts.authenticate(username, form.get('password') ?? '');
    if (!accountId) {
      log('login.failed', { username, client: client?.clientId });
      ctx.body = loginPage({ uid: interaction.uid, client, username, failed: true });
      return;
    }
    log('login.success', { username, client: client?.clientId });
    const result = { login: { accountId } };
    redirectAfterPost(ctx, await provider.interactionResult(
      ctx.req, ctx.res, result, { mergeWithLastSubmission: false },
    ));
  }

  async function confirm(ctx, interaction) {
    expectPrompt(interaction, 'consent');
    const result = await grantMissing(provider, interaction);
    redirectAfterPost(ctx, await provider.interactionResult(ctx.req, ctx.res, result));
  }

  async function abort(ctx) {
    const result = { error: 'access_denied', error_description: 'End-User cancelled the sign-in' };
    ctx.redirect(await provider.interactionResult(
      ctx.req, ctx.res, result, { mergeWithLastSubmission: false },
    ));
  }

  const actions = { show, login, confirm, abort };

  return async function interactions(ctx, next) {
    const match = ROUTE.exec(ctx.path);
    if (!match) return next();
    const [, uid, action = 'show'] = match;
    ctx.set('Cache-Control', 'no-store');
    if (ctx.method !== METHODS[action]) {
      ctx.status = 405;
      ctx.set('Allow', METHODS[action]);
      return undefined;
    }
    try {
      const interaction = await provider.interactionDetails(ctx.req, ctx.res);
      if (interaction.uid !== uid) {
        throw new errors.SessionNotFound('this sign-in page belongs to another sign-in; start again');
      }
      const client = await provider.Client.find(interaction.params.client_id);
      await actions[action](ctx, interaction, client);
    } catch (err) {
      if (!(err instanceof errors.OIDCProviderError)) throw err;
      log('interaction.error', { action, error: err.error, description: err.error_description });
      ctx.status = err.statusCode;
      ctx.body = errorPage({ error: err.error, error_description: err.error_description });
    }
    return undefined;
  };
}
