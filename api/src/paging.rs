//! Paged lists (`limit` and `continue`), as the agent's audit and the plugin read every
//! collection: one page a request, so that memory does not grow with the number of objects.
//! The requests are the callers' (each reads its pages its own way); which page comes next,
//! and when the list ends, is decided here.

use kube_core::params::ListParams;

/// The pages of one list: the parameters of each request, from the `continue` token the page
/// before was answered with. An absent or empty token ends the list.
#[derive(Debug, Clone)]
pub struct Pages {
    limit: u32,
    /// `None` before the first page; then the token of the next page, `None` after the last.
    next: Option<Option<String>>,
}

impl Pages {
    /// At most `limit` items a page.
    pub fn new(limit: u32) -> Self {
        Self { limit, next: None }
    }

    /// The parameters of the next page's request; `None` when the list has been read.
    pub fn next_params(&self) -> Option<ListParams> {
        let params = ListParams::default().limit(self.limit);
        match &self.next {
            None => Some(params),
            Some(Some(token)) => Some(params.continue_token(token)),
            Some(None) => None,
        }
    }

    /// Whether the last page answered has a next one.
    pub fn has_more(&self) -> bool {
        matches!(self.next, Some(Some(_)))
    }

    /// Takes the `metadata.continue` token a page was answered with.
    pub fn answered(&mut self, token: Option<&str>) {
        self.next = Some(token.filter(|t| !t.is_empty()).map(str::to_owned));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_the_continue_token_until_it_ends() {
        let mut pages = Pages::new(500);
        let first = pages.next_params().expect("a first page");
        assert_eq!((first.limit, first.continue_token), (Some(500), None));
        assert!(!pages.has_more());
        pages.answered(Some("abc"));
        assert!(pages.has_more());
        let second = pages.next_params().expect("a second page");
        assert_eq!(second.continue_token.as_deref(), Some("abc"));
        assert_eq!(second.limit, Some(500));
        pages.answered(Some(""));
        assert!(pages.next_params().is_none());
        assert!(!pages.has_more());
        let mut one = Pages::new(1);
        one.answered(None);
        assert!(one.next_params().is_none());
    }
}
