// The test suite's OpenID provider: oidc-provider (a certified implementation) on loopback.
// Users: alice (security-approvers), bob (ml-approvers), carol (no group); any password is accepted by
// the devInteractions login page; more from OIDC_USERS_FILE (below). Clients come from OIDC_CLIENTS (JSON),
// the ID token's lifetime from ID_TOKEN_TTL (seconds). It prints "listening <issuer>" once it serves.
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const port = Number(process.env.PORT);
const issuer = `http://127.0.0.1:${port}`;
const defaultUsers = {
  alice: ['security-approvers'],
  bob: ['ml-approvers'],
  carol: [],
};

// More users, or other groups for these, from OIDC_USERS_FILE ({"<login>": [groups]}), read again at each
// sign-in so a test can move a user between groups while the provider runs.
function users() {
  if (!process.env.OIDC_USERS_FILE) return defaultUsers;
  return { ...defaultUsers, ...JSON.parse(readFileSync(process.env.OIDC_USERS_FILE, 'utf8')) };
}

const provider = new Provider(issuer, {
  clients: JSON.parse(process.env.OIDC_CLIENTS),
  async findAccount(ctx, id) {
    const known = users();
    if (!(id in known)) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, name: id, groups: known[id] };
      },
    };
  },
  claims: { openid: ['sub'], profile: ['preferred_username', 'name'], groups: ['groups'] },
  scopes: ['openid', 'profile', 'groups'],
  // The groups claim travels in the ID token, where the registry reads it.
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true } },
  pkce: { required: () => true },
  ttl: { IdToken: Number(process.env.ID_TOKEN_TTL || 3600), AccessToken: 600, AuthorizationCode: 60 },
});
provider.proxy = false;
for (const event of ['server_error', 'authorization.error', 'grant.error']) {
  provider.on(event, (ctx, err) => console.log(`${event}: ${err.stack || err}`));
}
provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
