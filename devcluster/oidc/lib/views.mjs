// The provider's few HTML pages. Plain forms with labels and no scripts, so a
// screen reader, a headless browser and a requests.Session can all drive them.
// Stable hooks for tests: #username, #password and exactly one
// button[type=submit] per page.

const ESCAPES = {
  '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
};

export function escapeHtml(value) {
  return String(value ?? '').replace(/[&<>"']/g, (char) => ESCAPES[char]);
}

const STYLE = `
  body { font: 16px/1.5 system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
  main { max-width: 26rem; margin: 3rem auto; padding: 1.5rem 2rem; background: #fff;
         border: 1px solid #d5d9e0; border-radius: 6px; }
  h1 { font-size: 1.4rem; margin-top: 0; }
  label { display: block; font-weight: 600; margin-top: 1rem; }
  input { width: 100%; box-sizing: border-box; font: inherit; padding: .5rem; margin-top: .25rem;
          border: 1px solid #8a93a3; border-radius: 4px; }
  input:focus, button:focus, a:focus { outline: 3px solid #2f6fde; outline-offset: 2px; }
  button { margin-top: 1.25rem; width: 100%; font: inherit; font-weight: 600; padding: .6rem;
           color: #fff; background: #1f5fcc; border: 0; border-radius: 4px; cursor: pointer; }
  .alert { color: #8c1d18; background: #fdecea; border: 1px solid #e4a9a5; padding: .5rem .75rem;
           border-radius: 4px; }
  .secondary { display: block; text-align: center; margin-top: 1rem; color: #1f5fcc; }
  dt { font-weight: 600; }
  pre { white-space: pre-wrap; word-break: break-word; }
`;

function page(title, body) {
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)} · Berth dev sign-in</title>
<style>${STYLE}</style>
</head>
<body>
<main>
${body}
</main>
</body>
</html>`;
}

function clientLabel(client) {
  return escapeHtml(client?.clientName || client?.clientId || 'an application');
}

export function loginPage({ uid, client, username = '', failed = false }) {
  // After a failed attempt the username is kept, so the cursor goes to the password.
  const focusUsername = username ? '' : ' autofocus';
  const focusPassword = username ? ' autofocus' : '';
  const alert = failed
    ? '<p class="alert" role="alert" id="login-error">Wrong username or password.</p>'
    : '';
  return page('Sign in', `
<h1>Sign in</h1>
<p>to continue to <strong>${clientLabel(client)}</strong></p>
${alert}
<form method="post" action="/interaction/${escapeHtml(uid)}/login">
  <label for="username">Username</label>
  <input id="username" name="username" type="text" autocomplete="username"
         autocapitalize="none" spellcheck="false" required${focusUsername} value="${escapeHtml(username)}">
  <label for="password">Password</label>
  <input id="password" name="password" type="password" autocomplete="current-password" required${focusPassword}>
  <button type="submit">Sign in</button>
</form>
<a class="secondary" href="/interaction/${escapeHtml(uid)}/abort">Cancel</a>`);
}

export function consentPage({ uid, client, username, scopes }) {
  const items = scopes.map((scope) => `<li>${escapeHtml(scope)}</li>`).join('');
  return page('Allow access', `
<h1>Allow access?</h1>
<p><strong>${clientLabel(client)}</strong> asks to act as <strong>${escapeHtml(username)}</strong> with:</p>
<ul>${items || '<li>your identity (openid)</li>'}</ul>
<form method="post" action="/interaction/${escapeHtml(uid)}/confirm">
  <button type="submit">Allow</button>
</form>
<a class="secondary" href="/interaction/${escapeHtml(uid)}/abort">Cancel</a>`);
}

// `form` comes from oidc-provider: a form with id "op.logoutForm" and its
// anti-forgery field. Its single button says "yes" to signing out.
export function logoutPage({ form, host }) {
  return page('Sign out', `
<h1>Sign out of ${escapeHtml(host)}?</h1>
${form}
<button type="submit" form="op.logoutForm" name="logout" value="yes" autofocus>Sign out</button>`);
}

export function loggedOutPage({ client }) {
  const from = client ? ` from <strong>${clientLabel(client)}</strong>` : '';
  return page('Signed out', `<h1>Signed out</h1><p>You have been signed out${from}.</p>`);
}

export function errorPage(out) {
  const rows = Object.entries(out)
    .map(([key, value]) => `<dt>${escapeHtml(key)}</dt><dd><pre>${escapeHtml(value)}</pre></dd>`)
    .join('');
  return page('Sign-in error', `<h1>Something went wrong</h1><dl role="alert">${rows}</dl>`);
}
