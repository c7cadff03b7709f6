// Accounts come from a JSON users file that is read again on every lookup:
// tests and the demo change groups while the provider runs, and a group removed
// there must show in the next sign-in or token refresh, with no restart.
//
// File shape: { "users": { "<username>": { "password", "name", "email", "groups": [] } } }
// The username is also the subject (`sub`) and `preferred_username`.

import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';

function findUser(usersFile, username) {
  const { users = {} } = JSON.parse(readFileSync(usersFile, 'utf8'));
  return Object.hasOwn(users, username) ? users[username] : undefined;
}

function claimsOf(username, user) {
  return {
    sub: username,
    preferred_username: username,
    name: user.name ?? username,
    email: user.email,
    // Demo addresses are ours to vouch for; kube-apiserver rejects an `email`
    // username whose email_verified is false.
    email_verified: Boolean(user.email),
    groups: [...(user.groups ?? [])],
  };
}

// Hashing first gives equal-length buffers, so the comparison leaks no length.
function sameSecret(given, expected) {
  const digest = (value) => createHash('sha256').update(String(value)).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

export function accountStore(usersFile) {
  return {
    async findAccount(_ctx, sub) {
      const user = findUser(usersFile, sub);
      if (!user) return undefined;
      const claims = claimsOf(sub, user);
      return { accountId: sub, claims: async () => claims };
    },

    // The username if the password matches, else undefined.
    authenticate(username, password) {
      const user = findUser(usersFile, username);
      // Compare even for unknown users so timing does not reveal which names exist.
      const matches = sameSecret(password, user?.password ?? '\0no-such-user');
      return user && matches ? username : undefined;
    },

    // Claims a JWT access token carries, so an API can authorize without calling userinfo.
    async accessTokenClaims(accountId) {
      const user = findUser(usersFile, accountId);
      if (!user) return undefined;
      const { sub, ...claims } = claimsOf(accountId, user);
      return claims;
    },
  };
}
